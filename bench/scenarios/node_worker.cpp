#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

// The Node.js package's worker (clients/node, built by `npm ci` there;
// concurrency 1, 16 and 64 on its one event loop).
Figures node_worker(const Options& o, Json& table) {
  const std::string script = fmt::format("{}/bench/node_worker.mjs", DUEQ_SOURCE_DIR);
  return against_cpp_worker(o, table, "node", {1, 16, 64}, [&](int concurrency) {
    return std::vector<std::string>{"/usr/bin/env", "node", script, "--concurrency", std::to_string(concurrency)};
  });
}

}  // namespace dueq::bench
