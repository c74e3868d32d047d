#pragma once
// The bench's scenarios, one per file under bench/scenarios/, and the
// registry `dueq-bench --scenario` picks from. A scenario starts its own
// cluster, runs once, and returns its figures (the driver runs it --runs
// times and reports medians); rows it adds to `table` go into its record.
#include <functional>
#include <vector>

#include "bench/harness.hpp"

namespace dueq::bench {

struct Scenario {
  const char* name;
  const char* summary;
  bool in_all;  // run by --scenario all
  Figures (*run)(const Options& o, Json& table);
};

// In the order --scenario all runs them.
const std::vector<Scenario>& scenarios();

// bench/scenarios/throughput.cpp
Figures throughput(const Options& o, Json& table);
// bench/scenarios/lateness.cpp
Figures lateness(const Options& o, Json& table);
// bench/scenarios/latency.cpp
Figures latency(const Options& o, Json& table);
// bench/scenarios/recovery.cpp
Figures recovery(const Options& o, Json& table);
// bench/scenarios/duplicate_window.cpp
Figures duplicate_window(const Options& o, Json& table);
// bench/scenarios/memory.cpp
Figures memory(const Options& o, Json& table);
// bench/scenarios/backlog.cpp
Figures backlog(const Options& o, Json& table);
// bench/scenarios/audit.cpp
Figures audit_under_load(const Options& o, Json& table);
// bench/scenarios/search.cpp
Figures search_under_load(const Options& o, Json& table);
// bench/scenarios/curve.cpp
Figures curve(const Options& o, Json& table);
// bench/scenarios/single.cpp
Figures single(const Options& o, Json& table);
// bench/scenarios/defaults.cpp
Figures defaults(const Options& o, Json& table);
// 100,000 ready jobs drained without keys / with 100,000 keys (no limit, a limit of 1) / ordered, 1,000 keys.
Figures keyed_throughput(const Options& o, Json& table);
// bench/scenarios/ordering.cpp
Figures ordering(const Options& o, Json& table);
// bench/scenarios/results.cpp
Figures results(const Options& o, Json& table);
// bench/scenarios/progress.cpp
Figures progress_reports(const Options& o, Json& table);
// bench/scenarios/job_control.cpp
Figures job_control(const Options& o, Json& table);
// bench/scenarios/flows.cpp
Figures flows(const Options& o, Json& table);
// bench/scenarios/fairness.cpp
Figures fairness(const Options& o, Json& table);
// bench/scenarios/unique.cpp
Figures unique_jobs(const Options& o, Json& table);
// bench/scenarios/low_rate.cpp
Figures low_rate(const Options& o, Json& table);
// bench/scenarios/peers.cpp
Figures peers(const Options& o, Json& table);
// Steady flow on a Redis Cluster of 1, 2 and 3 masters: jobs/s, CPU per job of each process.
Figures cluster_scale(const Options& o, Json& table);
// bench/scenarios/metrics.cpp: steady flow scraped every second / without the HTTP server.
Figures metrics_cost(const Options& o, Json& table);

// bench/scenarios/hello_flood.cpp: a worker's drain alone / beside 30,000 hit-and-run HELLOs.
Figures hello_flood(const Options& o, Json& table);
// bench/scenarios/http_handler.cpp: dueq-worker's HTTP handler against a local server / exec /bin/true.
Figures http_handler(const Options& o, Json& table);
// bench/scenarios/trace.cpp: bulk enqueue and drain with a trace context on every job / none.
Figures trace_context(const Options& o, Json& table);
// A backlog of `n` noop jobs (queue "py") drained by one worker process
// (`argv`, the broker's endpoint and the queue appended); jobs/s from the
// worker's start to the last job done (bench/scenarios/python_worker.cpp).
double drain_backlog(std::vector<std::string> argv, size_t n);
// A worker of another language at each of `levels` (started by
// `worker_at(level)`) and dueq-example-worker × 16, each draining 20,000
// noop jobs (500 in a smoke run) alone, the process's start included:
// {language}_x{level}_jobs_per_s, its best, cpp_jobs_per_s and the ratio
// {language}_over_cpp (bench/scenarios/python_worker.cpp).
Figures against_cpp_worker(const Options& o, Json& table, const std::string& language, const std::vector<int>& levels,
                           const std::function<std::vector<std::string>(int)>& worker_at);
// bench/scenarios/python_worker.cpp: the Python worker / dueq-example-worker, noop backlogs.
Figures python_worker(const Options& o, Json& table);
// bench/scenarios/node_worker.cpp: the Node.js worker / dueq-example-worker, noop backlogs.
Figures node_worker(const Options& o, Json& table);

// Parts of scenarios that others run too.
Figures bulk_and_steady(const Options& o, int workers, int concurrency, const Link& link = {});
Figures latency_run(const Options& o, double rate, int workers, int concurrency, const Link& link = {});
Figures single_job(const Options& o, Json& table, const std::vector<std::string>& modes);
Figures default_settings(const Options& o, Json& table, const std::vector<std::string>& prefetches = {"", "500", "32"});

}  // namespace dueq::bench
