#include <httplib.h>

#include <atomic>
#include <thread>

#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {

// A backlog of `n` jobs drained by one dueq-worker with `handler` for their
// type and 16 handlers at once; jobs/s from the first start to the last done.
double drain_with(const Options& o, const std::string& handler, size_t n) {
  (void)o;
  Cluster cluster;
  Client client(cluster.endpoint(), with_timeouts({}));
  auto jobs = noop_jobs(n, "h");
  for (auto& j : jobs) j.payload = "{\"n\":1}";
  for (size_t i = 0; i < jobs.size(); i += 1000)
    (void)client.enqueue_batch(std::vector<JobSpec>(jobs.begin() + static_cast<long>(i),
                                                    jobs.begin() + static_cast<long>(std::min(jobs.size(), i + 1000))));
  const int64_t t0 = wall_us();
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "h", "--concurrency", "16",
                        "--exec", "noop=" + handler});
  await([&] { return done_count(cluster, "h") >= static_cast<int64_t>(n); }, 300s, 50ms);
  return static_cast<double>(n) / (static_cast<double>(wall_us() - t0) / 1e6);
}

}  // namespace

// dueq-worker's HTTP handler against a local HTTP server (cpp-httplib, 16
// threads, answering 204), and as the baseline in the same run the exec
// handler running /bin/true: one backlog each, drained by one worker with 16
// handlers. Both include the worker's start.
Figures http_handler(const Options& o, Json& table) {
  const size_t n = o.smoke ? 500 : 20'000;
  httplib::Server server;
  server.new_task_queue = [] { return new httplib::ThreadPool(16); };
  server.set_tcp_nodelay(true);
  server.Post("/job", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread listener([&] { server.listen_after_bind(); });
  Figures f;
  try {
    progress("http_handler: POST to a local server");
    f["http_jobs_per_s"] = drain_with(o, fmt::format("http://127.0.0.1:{}/job", port), n);
    progress("http_handler: exec /bin/true (baseline)");
    f["exec_true_jobs_per_s"] = drain_with(o, "/bin/true", o.smoke ? 200 : 5'000);
  } catch (...) {
    server.stop();
    listener.join();
    throw;
  }
  server.stop();
  listener.join();
  f["http_over_exec"] = f["http_jobs_per_s"] / f["exec_true_jobs_per_s"];
  table.push_back({{"jobs", n}, {"http_jobs_per_s", f["http_jobs_per_s"]}, {"exec_true_jobs_per_s", f["exec_true_jobs_per_s"]}});
  return f;
}

}  // namespace dueq::bench
