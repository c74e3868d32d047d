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

// The Python package's worker (clients/python, handler threads 1, 4 and
// 16: the GIL makes more threads no faster for short handlers) beside the
// C++ worker library (dueq-example-worker × 16) in the same run, each
// draining a backlog of noop jobs alone; both include the process's start.
Figures python_worker(const Options& o, Json& table) {
  const size_t n = o.smoke ? 500 : 20'000;
  const std::string python_path = std::string("PYTHONPATH=") + DUEQ_SOURCE_DIR + "/clients/python";
  const std::string script = std::string(DUEQ_SOURCE_DIR) + "/bench/python_worker.py";
  Figures f;
  double best = 0;
  for (const int threads : {1, 4, 16}) {
    progress(fmt::format("python_worker: the Python worker, {} handler threads", threads));
    const double rate = drain_backlog({"/usr/bin/env", python_path, "/usr/bin/python3", "-B", script, "--concurrency",
                                  std::to_string(threads)},
                                 n);
    f[fmt::format("python_x{}_jobs_per_s", threads)] = rate;
    best = std::max(best, rate);
  }
  progress("python_worker: dueq-example-worker × 16 (baseline)");
  f["cpp_jobs_per_s"] = drain_backlog({bin("dueq-example-worker"), "--concurrency", "16"}, n);
  f["python_best_jobs_per_s"] = best;
  f["python_over_cpp"] = best / f["cpp_jobs_per_s"];
  table.push_back({{"jobs", n}, {"python_best_jobs_per_s", best}, {"cpp_jobs_per_s", f["cpp_jobs_per_s"]}});
  return f;
}

}  // namespace dueq::bench
