#include "bench/scenarios.hpp"

#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

Figures backlog(const Options& o, Json&) {
  const size_t n = o.smoke ? 1'000 : 1'000'000;
  const double seconds = o.smoke ? 1 : 10;
  Figures f;
  for (const bool loaded : {false, true}) {
    Cluster cluster;
    if (loaded) {
      progress(fmt::format("backlog: scheduling {} jobs far in the future", n));
      enqueue_all(cluster.endpoint(), noop_jobs(n, "steady", wall_ms() + 86'400'000, 100), 2);
    }
    start_workers(cluster, "steady", 2, 32);
    cluster.wait_for_workers(2);
    progress(fmt::format("backlog: steady for {} s ({} store)", seconds, loaded ? "loaded" : "empty"));
    f[loaded ? "steady_loaded_jobs_per_s" : "steady_empty_jobs_per_s"] = steady(cluster, "steady", seconds);
  }
  f["ratio"] = f["steady_loaded_jobs_per_s"] / f["steady_empty_jobs_per_s"];
  return f;
}

}  // namespace dueq::bench
