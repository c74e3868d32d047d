#include "bench/scenarios.hpp"

#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

Figures recovery(const Options& o, Json&) {
  const int n = o.smoke ? 100 : 1000;
  Cluster cluster;
  Figures f = redis_baselines(cluster.redis());
  const auto record = cluster.dir() / "starts.txt";
  start_workers(cluster, "rec", 1, n, record.string());
  cluster.wait_for_workers(1);
  std::vector<JobSpec> jobs;
  jobs.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) jobs.push_back({"rec", "sleep", "120000", "", 0, 5});
  enqueue_all(cluster.endpoint(), jobs, 1);
  await([&] { return read_records(record).size() >= static_cast<size_t>(n); }, 60s);
  start_workers(cluster, "rec", 1, n, record.string());
  cluster.wait_for_workers(2);
  progress(fmt::format("recovery: SIGKILL of a worker holding {} jobs", n));
  const int64_t killed = wall_us();
  cluster.worker(0).signal(SIGKILL);
  // The broker never saw these jobs start (a first delivery is not
  // announced), so they come back without an attempt charged: a restart is
  // a second start record of the same id, after the kill.
  std::map<std::string, int64_t> restarted;  // id -> first start after the kill
  const auto collect = [&] {
    restarted.clear();
    for (const auto& r : read_records(record))
      if (r.start_us >= killed && !restarted.contains(r.id)) restarted[r.id] = r.start_us;
    return restarted.size() >= static_cast<size_t>(n);
  };
  await(collect, 60s);
  std::vector<double> delays;
  delays.reserve(restarted.size());
  for (const auto& [id, start_us] : restarted) delays.push_back(static_cast<double>(start_us - killed) / 1e6);
  f["p50_s"] = percentile(delays, 50);
  f["p99_s"] = percentile(delays, 99);
  f["max_s"] = percentile(delays, 100);
  return f;
}

}  // namespace dueq::bench
