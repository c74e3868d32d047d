#include "bench/scenarios.hpp"

#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

// 100,000 ready jobs drained by 2 example workers x 32, timed from the
// moment the workers start (their start-up counts, as it does for a user):
// with the default, adaptive prefetch, with --prefetch 500 (the tuned
// setting of the other scenarios) and with --prefetch 32 (= concurrency, the
// default before it adapted).
Figures default_settings(const Options& o, Json&, const std::vector<std::string>& prefetches) {
  const size_t n = o.smoke ? 1'000 : 100'000;
  Figures f;
  for (const std::string& prefetch : prefetches) {
    Cluster cluster;
    enqueue_all(cluster.endpoint(), noop_jobs(n, "bulk"), 2);
    progress(fmt::format("defaults: {} jobs, prefetch {}", n, prefetch.empty() ? "default" : prefetch));
    const int64_t t0 = wall_us();
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> argv = {bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "bulk", "--concurrency", "32"};
      if (!prefetch.empty()) argv.insert(argv.end(), {"--prefetch", prefetch});
      cluster.start_worker(argv);
    }
    await([&] { return done_count(cluster, "bulk") >= static_cast<int64_t>(n); }, 300s, 2ms);
    f[prefetch.empty() ? "default_jobs_per_s" : "prefetch_" + prefetch + "_jobs_per_s"] =
        static_cast<double>(n) / (static_cast<double>(wall_us() - t0) / 1e6);
  }
  if (f.contains("prefetch_500_jobs_per_s"))
    f["ratio_default_to_prefetch_500"] = f["default_jobs_per_s"] / f["prefetch_500_jobs_per_s"];
  return f;
}

Figures defaults(const Options& o, Json& table) { return default_settings(o, table); }

}  // namespace dueq::bench
