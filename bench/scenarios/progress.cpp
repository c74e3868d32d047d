#include <thread>

#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {
constexpr int kProgressJobs = 1'000;
constexpr int64_t kProgressWindowMs = 5'000;

// CPU of the broker and of the worker (µs) over kProgressWindowMs while
// 1,000 jobs of `type` run on one example worker of 1,000 handlers.
std::pair<int64_t, int64_t> cpu_while_running(const Options& o, const std::string& type) {
  Cluster cluster;
  cluster.start_example_worker("pr", kProgressJobs, (cluster.dir() / "starts.txt").string());
  if (!cluster.wait_for_workers(1)) throw std::runtime_error("progress: no worker registered");
  const int n = o.smoke ? 100 : kProgressJobs;
  std::vector<JobSpec> jobs;
  jobs.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) jobs.push_back({.queue = "pr", .type = type, .payload = "20000", .id = fmt::format("p-{}", i)});
  enqueue_all(cluster.endpoint(), jobs, 1);
  await([&] { auto s = cluster.stats("pr"); return s && s->in_flight == n; }, 60s, 50ms);
  std::this_thread::sleep_for(1s);  // past the first heartbeat with every job running
  const int64_t broker0 = cpu_us(cluster.broker().pid()), worker0 = cpu_us(cluster.worker(0).pid());
  std::this_thread::sleep_for(std::chrono::milliseconds(kProgressWindowMs));
  return {cpu_us(cluster.broker().pid()) - broker0, cpu_us(cluster.worker(0).pid()) - worker0};
}
}  // namespace

// Progress reports: 1,000 running jobs whose handlers report every 10 ms
// (100,000 reports a second), against the same jobs reporting nothing, in
// the same run: the CPU the broker and the worker use over 5 s. The worker
// keeps each job's latest report and sends one PROGRESS per heartbeat.
Figures progress_reports(const Options& o, Json& table) {
  Figures f;
  progress("progress: 1,000 running jobs reporting nothing (baseline)");
  const auto [quiet_broker, quiet_worker] = cpu_while_running(o, "sleep_quiet");
  progress("progress: 1,000 running jobs reporting every 10 ms");
  const auto [loud_broker, loud_worker] = cpu_while_running(o, "sleep");
  const double window_s = static_cast<double>(kProgressWindowMs) / 1000.0;
  f["broker_cpu_pct_quiet"] = static_cast<double>(quiet_broker) / 1e4 / window_s;
  f["broker_cpu_pct_reporting"] = static_cast<double>(loud_broker) / 1e4 / window_s;
  f["worker_cpu_pct_quiet"] = static_cast<double>(quiet_worker) / 1e4 / window_s;
  f["worker_cpu_pct_reporting"] = static_cast<double>(loud_worker) / 1e4 / window_s;
  f["reports_per_s"] = (o.smoke ? 100.0 : kProgressJobs) * 100.0;
  table.push_back({{"reports_per_s", f["reports_per_s"]},
                   {"broker_cpu_pct", {{"quiet", f["broker_cpu_pct_quiet"]}, {"reporting", f["broker_cpu_pct_reporting"]}}},
                   {"worker_cpu_pct", {{"quiet", f["worker_cpu_pct_quiet"]}, {"reporting", f["worker_cpu_pct_reporting"]}}}});
  return f;
}

}  // namespace dueq::bench
