// dueq-worker's HTTP handler (--exec 'TYPE=https://...') against local
// HTTP and HTTPS servers run by the test: the job's facts as headers, 2xx
// done and anything else failed with the status and the body's tail, a
// hung server cut off at the timeout while the worker goes on.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

// An HTTP(S) server on a thread of its own: /ok answers 204 and keeps the
// last request's headers, /fail answers 503, /hang never answers in time.
class JobServer {
 public:
  explicit JobServer(std::unique_ptr<httplib::Server> server) : server_(std::move(server)) {
    server_->set_tcp_nodelay(true);
    server_->Post("/ok", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex_);
      ++ok_count_;
      last_ = req;
      res.status = 204;
    });
    server_->Post("/fail", [](const httplib::Request&, httplib::Response& res) {
      res.status = 503;
      res.set_content(std::string(5000, '.') + "the end of a long error page: down for maintenance", "text/plain");
    });
    server_->Post("/hang", [this](const httplib::Request&, httplib::Response& res) {
      for (int i = 0; i < 100 && !stopping_; ++i) std::this_thread::sleep_for(50ms);
      res.status = 200;
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
  }
  ~JobServer() {
    stopping_ = true;
    server_->stop();
    thread_.join();
  }
  int port() const { return port_; }
  int ok_count() {
    std::lock_guard lock(mutex_);
    return ok_count_;
  }
  std::string header(const char* name) {
    std::lock_guard lock(mutex_);
    return last_.get_header_value(name);
  }
  std::string body() {
    std::lock_guard lock(mutex_);
    return last_.body;
  }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::mutex mutex_;
  int ok_count_ = 0;
  httplib::Request last_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
  std::thread thread_;
};

nlohmann::json job_json(const Cluster& cluster, const std::string& id) {
  auto run = run_dueq(cluster.endpoint(), "job " + id + " --json", false);
  return run.code == 0 ? nlohmann::json::parse(run.out, nullptr, false) : nlohmann::json();
}

// A string field of a job's JSON ("" when absent or null).
std::string text(const nlohmann::json& job, const char* key) {
  auto it = job.find(key);
  return it != job.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

// Rule: a 2xx answer is done and the request carries the payload and the
// job's id, attempt and due time; any other answer fails the attempt with
// the status and the tail of the body; a server that does not answer is cut
// off at --timeout while other jobs keep running.
TEST(HttpHandler, PostsTheJobAndFailsNon2xxAndHungRequestsWithTheReason) {
  JobServer server(std::make_unique<httplib::Server>());
  Cluster cluster;
  const std::string base = fmt::format("http://127.0.0.1:{}", server.port());
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "web", "--concurrency", "4",
                        "--timeout", "1s", "--exec", "ok=" + base + "/ok", "--exec", "fail=" + base + "/fail",
                        "--exec", "hang=" + base + "/hang"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  const int64_t due = wall_ms() + 300;
  ASSERT_TRUE(client.enqueue({.queue = "web", .type = "hang", .payload = "", .id = "h-1", .max_attempts = 1}));
  ASSERT_TRUE(client.enqueue({.queue = "web", .type = "ok", .payload = std::string("bin\0ary", 7), .id = "ok-1", .due_ms = due}));
  ASSERT_TRUE(client.enqueue({.queue = "web", .type = "fail", .payload = "x", .id = "f-1", .max_attempts = 1}));
  ASSERT_TRUE(eventually([&] { return text(job_json(cluster, "ok-1"), "state") == "done"; }, 10s));
  EXPECT_EQ(server.header("Dueq-Job-Id"), "ok-1");
  EXPECT_EQ(server.header("Dueq-Attempt"), "1");
  EXPECT_EQ(server.header("Dueq-Due-At-Ms"), std::to_string(due));
  EXPECT_EQ(server.header("Dueq-Queue"), "web");
  EXPECT_EQ(server.body(), std::string("bin\0ary", 7));
  ASSERT_TRUE(eventually([&] { return text(job_json(cluster, "f-1"), "state") == "dead"; }, 10s));
  const std::string fail_error = text(job_json(cluster, "f-1"), "last_error");
  EXPECT_NE(fail_error.find("HTTP 503"), std::string::npos) << fail_error;
  EXPECT_NE(fail_error.find("down for maintenance"), std::string::npos) << fail_error;
  ASSERT_TRUE(eventually([&] { return text(job_json(cluster, "h-1"), "state") == "dead"; }, 10s));
  const std::string hang_error = text(job_json(cluster, "h-1"), "last_error");
  EXPECT_NE(hang_error.find("timed out after 1000 ms"), std::string::npos) << hang_error;
  EXPECT_TRUE(cluster.worker(0).running());

  // Throughput against this local server, printed for the record (the
  // benchmark figure is bench/'s).
  const int n = 2000;
  std::vector<JobSpec> jobs;
  for (int i = 0; i < n; ++i) jobs.push_back({"web", "ok", "payload", fmt::format("t-{}", i), 0, 3});
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(client.enqueue_batch(jobs));
  ASSERT_TRUE(eventually([&] { return server.ok_count() >= n + 1; }, 60s));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  fprintf(stderr, "HTTP handler: %d jobs in %.2f s (%.0f jobs/s, 4 handlers, keep-alive)\n", n, seconds, n / seconds);
}

// Rule: https:// handlers verify the server's certificate: against the CA
// file given, the job runs; without it (a self-signed certificate) the
// attempt fails naming the TLS failure.
TEST(HttpHandler, HttpsVerifiesTheServerAgainstTheCaFile) {
  TempDir dir("tls");
  const auto cert = dir.path() / "cert.pem", key = dir.path() / "key.pem";
  const std::string openssl = fmt::format(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 "
      "-keyout {} -out {} 2>/dev/null", key.string(), cert.string());
  ASSERT_EQ(std::system(openssl.c_str()), 0);
  JobServer server(std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str()));
  Cluster cluster;
  const std::string url = fmt::format("https://127.0.0.1:{}/ok", server.port());
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "tls", "--timeout", "5s",
                        "--http-ca-file", cert.string(), "--exec", "ok=" + url});
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "untrusted", "--timeout", "5s",
                        "--exec", "ok=" + url});
  ASSERT_TRUE(cluster.wait_for_workers(2));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "tls", .type = "ok", .payload = "p", .id = "s-1"}));
  ASSERT_TRUE(client.enqueue({.queue = "untrusted", .type = "ok", .payload = "p", .id = "u-1", .max_attempts = 1}));
  EXPECT_TRUE(eventually([&] { return text(job_json(cluster, "s-1"), "state") == "done"; }, 10s));
  EXPECT_EQ(server.header("Dueq-Job-Id"), "s-1");
  ASSERT_TRUE(eventually([&] { return text(job_json(cluster, "u-1"), "state") == "dead"; }, 10s));
  const std::string error = text(job_json(cluster, "u-1"), "last_error");
  EXPECT_NE(error.find("SSL"), std::string::npos) << error;
}
