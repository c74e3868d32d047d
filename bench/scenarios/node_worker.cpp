#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

// The Node.js package's worker (clients/node, built by `npm ci` there;
// concurrency 1, 16 and 64 on its one event loop) beside the C++ worker
// library (dueq-example-worker × 16) in the same run, each draining a
// backlog of noop jobs alone; both include the process's start.
Figures node_worker(const Options& o, Json& table) {
  const size_t n = o.smoke ? 500 : 20'000;
  const std::string script = fmt::format("{}/bench/node_worker.mjs", DUEQ_SOURCE_DIR);
  Figures f;
  double best = 0;
  for (const int concurrency : {1, 16, 64}) {
    progress(fmt::format("node_worker: the Node.js worker, concurrency {}", concurrency));
    std::vector<std::string> argv{"/usr/bin/env", "node"};
    argv.push_back(script);
    argv.push_back("--concurrency");
    argv.push_back(std::to_string(concurrency));
    const double rate = drain_backlog(std::move(argv), n);
    f[fmt::format("node_x{}_jobs_per_s", concurrency)] = rate;
    best = std::max(best, rate);
  }
  progress("node_worker: dueq-example-worker × 16 (baseline)");
  f["cpp_jobs_per_s"] = drain_backlog({bin("dueq-example-worker"), "--concurrency", "16"}, n);
  f["node_best_jobs_per_s"] = best;
  f["node_over_cpp"] = best / f["cpp_jobs_per_s"];
  table.push_back({{"jobs", n}, {"node_best_jobs_per_s", best}, {"cpp_jobs_per_s", f["cpp_jobs_per_s"]}});
  return f;
}

}  // namespace dueq::bench
