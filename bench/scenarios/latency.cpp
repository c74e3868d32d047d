#include "bench/scenarios.hpp"

#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

Figures latency_run(const Options& o, double rate, int workers, int concurrency, const Link& link) {
  const double seconds = o.smoke ? 1 : 10;
  Cluster cluster(link.broker_args, {}, link.admin);
  Figures f = redis_baselines(cluster.redis());
  const auto record = cluster.dir() / "starts.txt";
  start_workers(cluster, "lat", workers, concurrency, record.string(), link);
  cluster.wait_for_workers(workers);
  progress(fmt::format("latency: {} workers x {}: {:.0f} jobs/s for {} s", workers, concurrency, rate, seconds));
  Client client(cluster.endpoint(), with_timeouts(link.client));
  const int64_t end = wall_us() + static_cast<int64_t>(seconds * 1e6);
  const size_t sent = paced_flow(client, "lat", rate, [&] { return wall_us() >= end; });
  await([&] { return done_count(cluster, "lat") >= static_cast<int64_t>(sent); }, 60s);
  std::vector<double> ms;
  for (const auto& r : read_records(record))
    if (r.payload != "-") ms.push_back(static_cast<double>(r.start_us - std::stoll(r.payload)) / 1000.0);
  f["rate_jobs_per_s"] = rate;
  f["p50_ms"] = percentile(ms, 50);
  f["p99_ms"] = percentile(ms, 99);
  f["p999_ms"] = percentile(ms, 99.9);
  return f;
}

// The figures are those of one worker process with 64 handler threads: at
// half load one process has the capacity (its steady maximum is above the
// rate), and on 2 cores every further process adds context switches to each
// job's path. The table has the 2- and 4-process runs next to it.
// The rate: --latency-rate, else half the steady maximum measured by the
// throughput scenario in the same invocation, else 20,000 jobs/s.
Figures latency(const Options& o, Json& table) {
  const double rate = o.latency_rate > 0 ? o.latency_rate : o.max_steady > 0 ? o.max_steady / 2 : (o.smoke ? 2'000 : 20'000);
  const std::vector<std::pair<int, int>> configs = o.smoke ? std::vector<std::pair<int, int>>{{1, 64}}
                                                           : std::vector<std::pair<int, int>>{{1, 64}, {2, 32}, {4, 16}};
  Figures reported;
  for (const auto& [workers, concurrency] : configs) {
    Figures f = latency_run(o, rate, workers, concurrency);
    table.push_back({{"workers", workers}, {"concurrency", concurrency}, {"rate_jobs_per_s", rate},
                     {"p50_ms", f["p50_ms"]}, {"p99_ms", f["p99_ms"]}, {"p999_ms", f["p999_ms"]}});
    if (workers == 1) {
      reported = f;
      reported["workers"] = workers;
      reported["concurrency"] = concurrency;
    }
  }
  return reported;
}

}  // namespace dueq::bench
