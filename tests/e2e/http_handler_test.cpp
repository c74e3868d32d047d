// dueq-worker's HTTP handler (--exec 'TYPE=https://...') against local
// HTTP and HTTPS servers run by the test: the job's facts as headers, 2xx
// done and anything else failed with the status and the body's tail, a
// hung server cut off at the timeout while the worker goes on.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <ctime>
#include <map>
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
    // The first call for a job: 429 with Retry-After in seconds (/busy) or
    // 503 with an HTTP date 2 s ahead (/busy-until); the next: 204.
    for (const char* path : {"/busy", "/busy-until"}) {
      server_->Post(path, [this, path](const httplib::Request& req, httplib::Response& res) {
        std::lock_guard lock(mutex_);
        auto& calls = busy_calls_[req.get_header_value("Dueq-Job-Id")];
        calls.push_back({dueq::wall_ms(), req.get_header_value("Dueq-Attempt")});
        if (calls.size() > 1) {
          res.status = 204;
        } else if (std::string_view(path) == "/busy") {
          res.status = 429;
          res.set_header("Retry-After", "1");
        } else {
          res.status = 503;
          const std::time_t at = std::time(nullptr) + 3;
          char date[64];
          std::tm tm{};
          gmtime_r(&at, &tm);
          std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
          res.set_header("Retry-After", date);
        }
      });
    }
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
  struct Call {
    int64_t at_ms;
    std::string attempt;
  };
  std::vector<Call> busy_calls(const std::string& id) {
    std::lock_guard lock(mutex_);
    return busy_calls_[id];
  }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::mutex mutex_;
  int ok_count_ = 0;
  httplib::Request last_;
  std::map<std::string, std::vector<Call>> busy_calls_;
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
  const std::string traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  ASSERT_TRUE(client.enqueue({.queue = "web", .type = "ok", .payload = std::string("bin\0ary", 7), .id = "ok-1", .due_ms = due,
                              .traceparent = traceparent, .tracestate = "congo=t61rcWkgMzE"}));
  ASSERT_TRUE(client.enqueue({.queue = "web", .type = "fail", .payload = "x", .id = "f-1", .max_attempts = 1}));
  ASSERT_TRUE(eventually([&] { return text(job_json(cluster, "ok-1"), "state") == "done"; }, 10s));
  EXPECT_EQ(server.header("Dueq-Job-Id"), "ok-1");
  EXPECT_EQ(server.header("Dueq-Attempt"), "1");
  EXPECT_EQ(server.header("Dueq-Due-At-Ms"), std::to_string(due));
  EXPECT_EQ(server.header("Dueq-Queue"), "web");
  EXPECT_EQ(server.header("traceparent"), traceparent) << "the job's trace context, as any traced request carries it";
  EXPECT_EQ(server.header("tracestate"), "congo=t61rcWkgMzE");
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

// Rule: a 429 or 503 with Retry-After (seconds, or an HTTP date) snoozes the
// job: it is posted again no sooner than that, as the same attempt, and ends
// done with no failure in its document.
TEST(HttpHandler, A429Or503WithRetryAfterSnoozesTheJobWithoutUsingAnAttempt) {
  JobServer server(std::make_unique<httplib::Server>());
  Cluster cluster;
  const std::string base = fmt::format("http://127.0.0.1:{}", server.port());
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "web", "--timeout", "5s",
                        "--exec", "busy=" + base + "/busy", "--exec", "until=" + base + "/busy-until"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "web", .type = "busy", .id = "b-1", .max_attempts = 1}));
  ASSERT_TRUE(client.enqueue({.queue = "web", .type = "until", .id = "u-1", .max_attempts = 1}));
  for (const char* id : {"b-1", "u-1"})
    ASSERT_TRUE(eventually([&] { return text(job_json(cluster, id), "state") == "done"; }, 20s)) << job_json(cluster, id);
  const auto busy = server.busy_calls("b-1"), until = server.busy_calls("u-1");
  ASSERT_EQ(busy.size(), 2u);
  ASSERT_EQ(until.size(), 2u);
  EXPECT_GE(busy[1].at_ms - busy[0].at_ms, 1000) << "Retry-After: 1 waited out";
  // The date has whole seconds: at least 2 s after the first call.
  EXPECT_GE(until[1].at_ms - until[0].at_ms, 2000) << "the Retry-After date waited out";
  for (const auto* calls : {&busy, &until}) {
    EXPECT_EQ((*calls)[0].attempt, "1");
    EXPECT_EQ((*calls)[1].attempt, "1") << "a snooze uses no attempt (max_attempts 1 would have made it dead)";
  }
}
