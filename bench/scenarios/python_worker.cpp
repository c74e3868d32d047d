#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

double drain_backlog(std::vector<std::string> argv, size_t n) {
  Cluster cluster;
  Client client(cluster.endpoint(), with_timeouts({}));
  auto jobs = noop_jobs(n, "py");
  for (size_t i = 0; i < jobs.size(); i += 1000)
    (void)client.enqueue_batch(std::vector<JobSpec>(jobs.begin() + static_cast<long>(i),
                                                    jobs.begin() + static_cast<long>(std::min(jobs.size(), i + 1000))));
  argv.insert(argv.end(), {"--broker", cluster.endpoint(), "--queue", "py"});
  const int64_t t0 = wall_us();
  cluster.start_worker(argv);
  await([&] { return done_count(cluster, "py") >= static_cast<int64_t>(n); }, 300s, 50ms);
  return static_cast<double>(n) / (static_cast<double>(wall_us() - t0) / 1e6);
}

Figures against_cpp_worker(const Options& o, Json& table, const std::string& language, const std::vector<int>& levels,
                           const std::function<std::vector<std::string>(int)>& worker_at) {
  const size_t n = o.smoke ? 500 : 20'000;
  Figures f;
  double best = 0;
  for (const int level : levels) {
    progress(fmt::format("{}_worker: the {} worker at concurrency {}", language, language, level));
    const double rate = drain_backlog(worker_at(level), n);
    f[fmt::format("{}_x{}_jobs_per_s", language, level)] = rate;
    best = std::max(best, rate);
  }
  progress(fmt::format("{}_worker: dueq-example-worker × 16 (baseline)", language));
  const double cpp = drain_backlog({bin("dueq-example-worker"), "--concurrency", "16"}, n);
  f["cpp_jobs_per_s"] = cpp;
  f[language + "_best_jobs_per_s"] = best;
  f[language + "_over_cpp"] = best / cpp;
  table.push_back({{"jobs", n}, {language + "_best_jobs_per_s", best}, {"cpp_jobs_per_s", cpp}});
  return f;
}

// The Python package's worker (clients/python, handler threads 1, 4 and
// 16: the GIL makes more threads no faster for short handlers).
Figures python_worker(const Options& o, Json& table) {
  const std::string python_path = std::string("PYTHONPATH=") + DUEQ_SOURCE_DIR + "/clients/python";
  const std::string script = std::string(DUEQ_SOURCE_DIR) + "/bench/python_worker.py";
  return against_cpp_worker(o, table, "python", {1, 4, 16}, [&](int threads) {
    return std::vector<std::string>{"/usr/bin/env", python_path, "/usr/bin/python3", "-B", script, "--concurrency",
                                    std::to_string(threads)};
  });
}

}  // namespace dueq::bench
