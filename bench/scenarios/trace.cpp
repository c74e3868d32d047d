#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {

constexpr const char* kTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

// 100,000 jobs (1,000 in a smoke run) of queue "tr", each with a trace
// context (a traceparent and a 30-byte tracestate) or none: enqueued in
// bulk (jobs/s), then drained by 2 example workers x 32 with --prefetch 500
// from the moment they start (jobs/s).
std::pair<double, double> enqueue_and_drain(const Options& o, bool traced) {
  const size_t n = o.smoke ? 1'000 : 100'000;
  Cluster cluster;
  std::vector<JobSpec> jobs = noop_jobs(n, "tr");
  for (size_t i = 0; traced && i < n; ++i) {
    jobs[i].traceparent = kTraceparent;
    jobs[i].tracestate = "vendor=00f067aa0ba902b7,other=1";
  }
  progress(fmt::format("trace: {} jobs, {}", n, traced ? "each with a trace context" : "none"));
  const double enqueue_rate = enqueue_all(cluster.endpoint(), jobs, 2);
  const int64_t t0 = wall_us();
  start_workers(cluster, "tr", 2, 32);
  await([&] { return done_count(cluster, "tr") >= static_cast<int64_t>(n); }, 300s, 2ms);
  return {enqueue_rate, static_cast<double>(n) / (static_cast<double>(wall_us() - t0) / 1e6)};
}

}  // namespace

// What carrying a W3C trace context costs (docs/jobs.md, "Tracing"): bulk
// enqueue and drain with one on every job against none, in one run.
Figures trace_context(const Options& o, Json&) {
  const auto [plain_enqueue, plain_drain] = enqueue_and_drain(o, false);
  const auto [traced_enqueue, traced_drain] = enqueue_and_drain(o, true);
  return {{"plain_enqueue_jobs_per_s", plain_enqueue},
          {"traced_enqueue_jobs_per_s", traced_enqueue},
          {"plain_drain_jobs_per_s", plain_drain},
          {"traced_drain_jobs_per_s", traced_drain},
          {"ratio_traced_enqueue", traced_enqueue / plain_enqueue},
          {"ratio_traced_drain", traced_drain / plain_drain}};
}

}  // namespace dueq::bench
