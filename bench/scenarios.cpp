#include "bench/scenarios.hpp"

namespace dueq::bench {

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> all = {
      {"throughput", "bulk enqueue, bulk processing and 20 s of steady flow, best of 1x64, 2x32, 4x16 workers", true, throughput},
      {"lateness", "20,000 timers due over 10 s: how late each starts", true, lateness},
      {"latency", "enqueue-to-start at half the steady maximum (--latency-rate)", true, latency},
      {"recovery", "SIGKILL of a worker holding 1,000 started jobs: time until each starts again", true, recovery},
      {"duplicate_window", "a resend 15 s after its job finished, at the top steady rate, must be a duplicate", true, duplicate_window},
      {"memory", "Redis bytes per delayed job and per done id", true, memory},
      {"backlog", "steady throughput with 1,000,000 jobs scheduled ahead / with none", true, backlog},
      {"audit", "a full audit of 1,000,000 jobs while 20,000 jobs/s flow: p99 with / without", true, audit_under_load},
      {"search", "whole searches of a queue of 1,000,000 jobs; 20,000 jobs/s beside a storm of them: p99 with / without", true, search_under_load},
      {"curve", "CurveZMQ / plaintext: throughput and half-load latency", true, curve},
      {"single", "one job per call, 50 outstanding from one process (--single-modes)", true, single},
      {"defaults", "100,000 ready jobs drained at default worker settings", true, defaults},
      {"keys", "100,000 ready jobs drained: without keys / 100,000 keys, no limit / limit 1 per key / ordered, 1,000 keys / fair, 100,000 keys", true, keyed_throughput},
      {"unique", "100,000 jobs enqueued with a unique key each / without; 4 producers racing for one unique key held 100 ms: jobs let in, and the most a period allows", true, unique_jobs},
      {"ordering", "100,000 jobs of an ordered queue, 1,000 keys, through a worker SIGKILL every 2 s and a take-over: order violations", true, ordering},
      {"fairness", "1,000 light keys at 500 jobs/s beside keys with 1,000,000 / 200,000 / 300,000 jobs ready (weights 1, 2, 3): light enqueue-to-start in a fair queue / not fair, and the shares by weight", true, fairness},
      {"results", "2,000 jobs due 10 ms apart whose handlers return results, each waited for: how long after its handler started each wait returned", true, results},
      {"progress", "1,000 running jobs reporting progress every 10 ms / reporting nothing: broker and worker CPU", true, progress_reports},
      {"job_control", "2,000 jobs rescheduled by id 300 ms before due: answer time and lateness after the new due time; 1,000 jobs snoozed once for 200 ms: how long past it they run again", true, job_control},
      {"flows", "a batch of 100,000 members: its complete callback's start after the last member's; 300 flows of 10: each parent's start after its last child's; flow enqueue / plain enqueue of 10-job requests; Redis bytes per batch member, flow child and plain job", true, flows},
      {"low_rate", "1,000 single-job enqueues per second: enqueue-to-start", true, low_rate},
      {"cluster", "steady flow over 6 queues on a Redis Cluster of 1, 2 and 3 masters: jobs/s, CPU per job", true, cluster_scale},
      {"http_handler", "dueq-worker's HTTP handler draining a backlog against a local server / the exec handler running /bin/true", true, http_handler},
      {"trace", "100,000 jobs each with a W3C trace context / none: bulk enqueue and drain", true, trace_context},
      {"python_worker", "the Python package's worker draining a backlog of noop jobs / the C++ worker library", true, python_worker},
      {"node_worker", "the Node.js package's worker draining a backlog of noop jobs / the C++ worker library", true, node_worker},
      {"hello_flood", "one worker draining 20,000 jobs of 5 ms alone / beside 30,000 hit-and-run HELLOs", true, hello_flood},
      {"metrics", "steady flow with /metrics scraped every second / without the HTTP server, 100 idle queues besides", true, metrics_cost},
      {"peers", "single, low_rate and defaults for dueq and for BullMQ (make bench-peers; not in all)", false, peers},
  };
  return all;
}

}  // namespace dueq::bench
