#include "bench/scenarios.hpp"

#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

// Bulk (n jobs enqueued, then drained) and steady throughput on one fresh
// cluster of `workers` processes.
Figures bulk_and_steady(const Options& o, int workers, int concurrency, const Link& link) {
  const size_t n = o.smoke ? 1'000 : 200'000;
  const double steady_s = o.smoke ? 1 : 20;
  Cluster cluster(link.broker_args, {}, link.admin);
  Figures f = redis_baselines(cluster.redis());
  progress(fmt::format("throughput: {} workers x {}: enqueueing {} jobs", workers, concurrency, n));
  f["bulk_enqueue_jobs_per_s"] = enqueue_all(cluster.endpoint(), noop_jobs(n, "bulk"), 2, link);
  // Processing is timed from the first completed job (so worker start-up is
  // not counted) to the last.
  start_workers(cluster, "bulk", workers, concurrency, "", link);
  int64_t d0 = 0, t0 = 0;
  await([&] {
    d0 = done_count(cluster, "bulk");
    t0 = wall_us();
    return d0 > 0;
  }, 60s, 1ms);
  await([&] { return done_count(cluster, "bulk") >= static_cast<int64_t>(n); }, 300s);
  f["bulk_process_jobs_per_s"] = static_cast<double>(static_cast<int64_t>(n) - d0) / (static_cast<double>(wall_us() - t0) / 1e6);
  cluster.wait_for_workers(workers);
  start_workers(cluster, "steady", workers, concurrency, "", link);
  cluster.wait_for_workers(2 * static_cast<size_t>(workers));
  progress(fmt::format("throughput: {} workers x {}: steady for {} s", workers, concurrency, steady_s));
  f["steady_jobs_per_s"] = steady(cluster, "steady", steady_s, link);
  return f;
}


Figures throughput(const Options& o, Json& table) {
  const std::vector<std::pair<int, int>> configs = o.smoke ? std::vector<std::pair<int, int>>{{2, 32}}
                                                           : std::vector<std::pair<int, int>>{{1, 64}, {2, 32}, {4, 16}};
  Figures best;
  for (const auto& [workers, concurrency] : configs) {
    Figures f = bulk_and_steady(o, workers, concurrency);
    table.push_back({{"workers", workers}, {"concurrency", concurrency}, {"bulk_enqueue_jobs_per_s", f["bulk_enqueue_jobs_per_s"]},
                     {"bulk_process_jobs_per_s", f["bulk_process_jobs_per_s"]}, {"steady_jobs_per_s", f["steady_jobs_per_s"]}});
    for (const char* k : {"bulk_enqueue_jobs_per_s", "bulk_process_jobs_per_s", "steady_jobs_per_s"}) best[k] = std::max(best[k], f[k]);
    best["redis_pipelined_incr_per_s"] = f["redis_pipelined_incr_per_s"];
    best["redis_round_trip_us"] = f["redis_round_trip_us"];
  }
  best["ratio_process_to_pipelined_incr"] = best["bulk_process_jobs_per_s"] / best["redis_pipelined_incr_per_s"];
  return best;
}

}  // namespace dueq::bench
