#include "bench/scenarios.hpp"

#include <fstream>
#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

Figures lateness(const Options& o, Json&) {
  const size_t n = o.smoke ? 2'000 : 20'000;
  const int64_t spread_ms = o.smoke ? 2'000 : 10'000;
  Cluster cluster;
  Figures f = redis_baselines(cluster.redis());
  const auto record = cluster.dir() / "starts.txt";
  start_workers(cluster, "timers", 4, 16, record.string());
  cluster.wait_for_workers(4);
  const int64_t base = wall_ms() + 2'000;
  std::vector<JobSpec> jobs;
  for (size_t i = 0; i < n; ++i) jobs.push_back({"timers", "noop", "", "", base + static_cast<int64_t>(i) * spread_ms / static_cast<int64_t>(n), 0});
  progress(fmt::format("lateness: {} timers over {} ms", n, spread_ms));
  enqueue_all(cluster.endpoint(), jobs, 2);
  await([&] { return done_count(cluster, "timers") >= static_cast<int64_t>(n); }, 120s);
  std::vector<double> late;
  double early = 0;
  for (const auto& r : read_records(record)) {
    const double ms = static_cast<double>(r.start_us - r.due_ms * 1000) / 1000.0;
    if (ms < 0) ++early;
    late.push_back(ms);
  }
  if (!o.plot_data.empty()) {
    // Sorted lateness samples, for bench/plot-lateness.sh.
    std::sort(late.begin(), late.end());
    std::ofstream data(o.plot_data);
    for (size_t i = 0; i < late.size(); ++i) data << late[i] << " " << (static_cast<double>(i) + 1.0) / static_cast<double>(late.size()) << "\n";
  }
  f["p50_ms"] = percentile(late, 50);
  f["p99_ms"] = percentile(late, 99);
  f["p999_ms"] = percentile(late, 99.9);
  f["max_ms"] = percentile(late, 100);
  f["early"] = early;
  f["started"] = static_cast<double>(late.size());
  return f;
}

}  // namespace dueq::bench
