// The broker's HTTP server: /metrics that promtool accepts and a real
// Prometheus scrapes, with figures that agree with `dueq stats`; /healthz
// and /readyz; and its limits, pushed past next to a healthy worker.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <set>
#include <fstream>
#include <thread>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

struct HttpAnswer {
  int status = -1;
  std::string body;
};

HttpAnswer http_get(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  auto res = client.Get(path);
  if (!res) return {};
  return {res->status, res->body};
}

// The value of one sample line ("name{labels} value") in an exposition text, or -1.
double sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// Producer: `per_tick` jobs every 100 ms to `queue` until stopped.
class SteadyProducer {
 public:
  SteadyProducer(const std::string& endpoint, std::string queue, int per_tick)
      : thread_([this, endpoint, queue = std::move(queue), per_tick] {
          Client client(endpoint, ClientOptions{.timeout_ms = 2000, .attempts = 3});
          for (int tick = 0; running_; ++tick) {
            std::vector<JobSpec> jobs;
            for (int i = 0; i < per_tick; ++i) jobs.push_back({queue, "noop", "", fmt::format("p-{}-{}", tick, i), 0, 3});
            (void)client.enqueue_batch(jobs);
            std::this_thread::sleep_for(100ms);
          }
        }) {}
  ~SteadyProducer() { stop(); }
  void stop() {
    running_ = false;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> running_{true};
  std::thread thread_;
};

std::string run_command(const std::string& command, int* code) {
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    const int status = ::pclose(pipe);
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return out;
}

// promtool accepts the scrape `text` and has no advice on its names.
void expect_promtool_clean(Cluster& cluster, const std::string& text) {
  const auto file = cluster.dir() / "scrape.txt";
  std::ofstream(file) << text;
  int code = -1;
  const std::string lint = run_command("promtool check metrics < " + file.string() + " 2>&1", &code);
  EXPECT_EQ(code, 0) << lint;
  EXPECT_EQ(lint, "") << "promtool's advice on the names";
}

}  // namespace

TEST(Metrics, PromtoolAcceptsAScrapeAndItsCountsAreThoseOfDueqStats) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  cluster.start_example_worker("m", 8, (cluster.dir() / "starts.txt").string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  {
    SteadyProducer producer(cluster.endpoint(), "m", 20);
    std::this_thread::sleep_for(2s);
  }
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"m", "noop", "", "later", 0, 0}).has_value());
  auto much_later = client.enqueue({"m", "noop", "", "much-later", std::time(nullptr) * 1000LL + 3'600'000, 0});
  ASSERT_TRUE(much_later.has_value());
  ASSERT_EQ(much_later->status, EnqueueResult::Status::accepted) << much_later->reason;
  // Once everything due ran, the counts stand still: compare them.
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("m"); return s && s->waiting == 0 && s->in_flight == 0; }, 20s));
  const auto stats = *cluster.stats("m");
  std::string text;
  ASSERT_TRUE(eventually([&] {
    text = http_get(http, "/metrics").body;
    return sample(text, "dueq_jobs_done_total{queue=\"m\"}") == static_cast<double>(stats.done) &&
           sample(text, "dueq_jobs_enqueued_total{queue=\"m\"}") == static_cast<double>(stats.accepted);
  }, 10s)) << text;
  EXPECT_EQ(stats.scheduled, 1);
  EXPECT_EQ(sample(text, "dueq_jobs_scheduled{queue=\"m\"}"), 1.0);
  EXPECT_EQ(sample(text, "dueq_jobs_ready{queue=\"m\"}"), 0.0);
  EXPECT_EQ(sample(text, "dueq_jobs_in_flight{queue=\"m\"}"), 0.0);
  EXPECT_EQ(sample(text, "dueq_job_lateness_seconds_count{queue=\"m\"}"), static_cast<double>(stats.done));
  EXPECT_EQ(sample(text, "dueq_workers"), 1.0);
  EXPECT_EQ(sample(text, "dueq_leader"), 1.0);
  EXPECT_GT(sample(text, "dueq_redis_round_seconds_count"), 0.0);

  expect_promtool_clean(cluster, text);
}

// Run time per queue and type (a job's result arrives no sooner than its
// handler ends: three 300 ms sleeps take 0.9 s at least), workers per queue,
// and enqueue-to-start of a delayed job counted from its due time: for a
// queue holding only delayed jobs it is their lateness, to the bucket.
TEST(Metrics, RunTimeIsPerQueueAndTypeAndADelayedJobWaitsFromItsDueTime) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "r", "--queue", "d",
                        "--concurrency", "4"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue_batch({{"r", "sleep", "300", "s-1", 0, 1}, {"r", "sleep", "300", "s-2", 0, 1},
                                    {"r", "sleep", "300", "s-3", 0, 1}, {"r", "noop", "", "n-1", 0, 1},
                                    {"d", "noop", "", "late-1", Client::in_ms(2'000), 1},
                                    {"orphan", "noop", "", "o-1", 0, 1}}));
  ASSERT_TRUE(eventually([&] {
    auto r = cluster.stats("r");
    auto d = cluster.stats("d");
    return r && d && r->done == 4 && d->done == 1;
  }, 20s));
  std::string text;
  ASSERT_TRUE(eventually([&] {
    text = http_get(http, "/metrics").body;
    return sample(text, "dueq_job_run_seconds_count{queue=\"d\",type=\"noop\"}") == 1.0 &&
           sample(text, "dueq_queue_workers{queue=\"orphan\"}") == 0.0;
  }, 10s)) << text;
  EXPECT_EQ(sample(text, "dueq_job_run_seconds_count{queue=\"r\",type=\"sleep\"}"), 3.0);
  EXPECT_EQ(sample(text, "dueq_job_run_seconds_count{queue=\"r\",type=\"noop\"}"), 1.0);
  EXPECT_GE(sample(text, "dueq_job_run_seconds_sum{queue=\"r\",type=\"sleep\"}"), 0.9);
  EXPECT_EQ(sample(text, "dueq_queue_workers{queue=\"r\"}"), 1.0);
  EXPECT_EQ(sample(text, "dueq_queue_workers{queue=\"d\"}"), 1.0);
  const double waited = sample(text, "dueq_job_enqueue_to_start_seconds_sum{queue=\"d\"}");
  EXPECT_EQ(waited, sample(text, "dueq_job_lateness_seconds_sum{queue=\"d\"}")) << "not the 2 s of its delay";
  EXPECT_GE(waited, 0.0);
  expect_promtool_clean(cluster, text);
}

TEST(Metrics, APrometheusServerScrapesTheBrokerAndItsRateAgreesWithDueqStats) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  cluster.start_example_worker("r", 8, (cluster.dir() / "starts.txt").string());
  ASSERT_TRUE(cluster.wait_for_workers(1));

  const int prom_port = free_port();
  const auto config = cluster.dir() / "prometheus.yml";
  std::ofstream(config) << fmt::format(
      "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      "scrape_configs:\n  - job_name: dueq\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
      http);
  Process prometheus({"prometheus", "--config.file=" + config.string(),
                      "--storage.tsdb.path=" + (cluster.dir() / "tsdb").string(),
                      fmt::format("--web.listen-address=127.0.0.1:{}", prom_port)},
                     (cluster.dir() / "prometheus.log").string());
  auto query = [&](const std::string& promql, int64_t at_s) -> std::optional<double> {
    httplib::Params params{{"query", promql}, {"time", std::to_string(at_s)}};
    httplib::Client client("127.0.0.1", prom_port);
    client.set_read_timeout(5, 0);
    auto res = client.Get("/api/v1/query", params, httplib::Headers{});
    if (!res || res->status != 200) return std::nullopt;
    auto body = nlohmann::json::parse(res->body, nullptr, false);
    if (body.is_discarded() || body["status"] != "success" || body["data"]["result"].empty()) return std::nullopt;
    return std::stod(body["data"]["result"][0]["value"][1].get<std::string>());
  };
  ASSERT_TRUE(eventually([&] { return query("up{job=\"dueq\"}", std::time(nullptr)) == 1.0; }, 30s))
      << read_file(cluster.dir() / "prometheus.log");

  // 200 jobs/s; the test reads `dueq stats` 10 s apart and asks Prometheus
  // for the rate over the same 10 s.
  SteadyProducer producer(cluster.endpoint(), "r", 20);
  std::this_thread::sleep_for(3s);
  // The dueq side is timed in ms: whole seconds from std::time() put up to
  // a second (10%) of error into a 10 s window (a fresh clone's make test
  // saw 192 against Prometheus's 171 so).
  const int64_t from_s = std::time(nullptr);
  const int64_t from_ms = steady_ms();
  const int64_t done_from = cluster.stats("r")->done;
  std::this_thread::sleep_for(10s);
  const int64_t to_s = std::time(nullptr);
  const int64_t done_to = cluster.stats("r")->done;
  const double stats_rate = static_cast<double>(done_to - done_from) * 1000.0 / static_cast<double>(steady_ms() - from_ms);
  producer.stop();
  std::optional<double> prom_rate;
  // Prometheus has the last samples of the window a scrape after it ends.
  ASSERT_TRUE(eventually([&] {
    prom_rate = query(fmt::format("rate(dueq_jobs_done_total{{queue=\"r\"}}[{}s])", to_s - from_s), to_s);
    return prom_rate.has_value();
  }, 10s));
  std::printf("[ rate     ] dueq stats: %.1f jobs/s, Prometheus rate(): %.1f jobs/s\n", stats_rate, *prom_rate);
  EXPECT_GT(done_to - done_from, 100) << "jobs flowed over the window";
  EXPECT_NEAR(*prom_rate, stats_rate, stats_rate * 0.1);

  // Once the flow stops, the last value Prometheus scraped is the count `dueq stats` shows.
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("r"); return s && s->waiting == 0 && s->in_flight == 0; }, 20s));
  const int64_t done = cluster.stats("r")->done;
  std::optional<double> scraped;
  ASSERT_TRUE(eventually([&] {
    scraped = query("dueq_jobs_done_total{queue=\"r\"}", std::time(nullptr));
    return scraped == static_cast<double>(done);
  }, 10s)) << "Prometheus has " << scraped.value_or(-1) << ", dueq stats " << done;
  std::printf("[ total    ] dueq stats: %lld done, Prometheus: %.0f\n", static_cast<long long>(done), *scraped);
}

TEST(Metrics, ReadyzSaysReadyOnlyWhileTheBrokerLeadsWithRedisUp) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  ASSERT_TRUE(eventually([&] { return http_get(http, "/readyz").status == 200; }, 10s));
  EXPECT_EQ(http_get(http, "/healthz").status, 200);

  // A second broker on the same Redis stands by: alive, not ready.
  const int standby_http = free_port();
  Process standby({bin("dueq-broker"), "--redis", cluster.redis().url(), "--listen",
                   fmt::format("tcp://127.0.0.1:{}", free_port()), "--http", fmt::format("127.0.0.1:{}", standby_http)},
                  (cluster.dir() / "standby.log").string());
  HttpAnswer standby_ready;
  // Not ready while it starts, then while it stands by, saying so.
  ASSERT_TRUE(eventually([&] {
    standby_ready = http_get(standby_http, "/readyz");
    return standby_ready.status == 503 && standby_ready.body.find("standing by") != std::string::npos;
  }, 10s)) << standby_ready.status << " " << standby_ready.body;
  EXPECT_EQ(http_get(standby_http, "/healthz").status, 200);
  EXPECT_EQ(sample(http_get(standby_http, "/metrics").body, "dueq_leader"), 0.0);

  // Redis gone: not ready, still alive; back: ready again.
  cluster.redis().kill(SIGKILL);
  HttpAnswer ready;
  ASSERT_TRUE(eventually([&] { ready = http_get(http, "/readyz"); return ready.status == 503; }, 10s));
  EXPECT_NE(ready.body.find("Redis"), std::string::npos) << ready.body;
  EXPECT_EQ(http_get(http, "/healthz").status, 200);
  cluster.redis().start();
  EXPECT_TRUE(eventually([&] { return http_get(http, "/readyz").status == 200; }, 20s));
}

namespace {

size_t open_descriptors(pid_t pid) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

// A TCP connection to 127.0.0.1:port, begun without waiting (the server's
// listen backlog is short: past it a connect waits), that sends `text` once
// it is up and then nothing.
int open_silent_connection(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

// A thousand connections that never finish a request hold no server
// thread: /healthz and /readyz are answered beside them every time, each
// connection gets "408" once its request has taken 5 s (a byte a second
// does not keep it), the descriptors they hold stay within the front's
// limit, jobs keep flowing, and an oversized body is refused.
TEST(Metrics, AThousandSlowHttpConnectionsLeaveHealthzAnsweredAndLoseNoJob) {
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = std::max<rlim_t>(files.rlim_cur, std::min<rlim_t>(files.rlim_max, 4096));
  ::setrlimit(RLIMIT_NOFILE, &files);
  ASSERT_GE(files.rlim_cur, 2048u) << "this test needs 1,000 descriptors of its own";
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("h", 8, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  ASSERT_EQ(http_get(http, "/metrics").status, 200);
  const size_t descriptors_before = open_descriptors(cluster.broker().pid());

  std::vector<int> flood;
  for (int i = 0; i < 1000; ++i)
    if (const int fd = open_silent_connection(http); fd >= 0) flood.push_back(fd);
  ASSERT_EQ(flood.size(), 1000u);
  // Half of them start a request, then send one more byte a second.
  const std::string partial = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  std::atomic<bool> trickling{true};
  std::thread trickle([&] {
    for (size_t i = 1; i < flood.size(); i += 2) [[maybe_unused]] auto n = ::send(flood[i], partial.data(), partial.size(), MSG_NOSIGNAL);
    while (trickling) {
      for (size_t i = 1; i < flood.size(); i += 2) [[maybe_unused]] auto n = ::send(flood[i], "X", 1, MSG_NOSIGNAL);
      for (int slept = 0; slept < 10 && trickling; ++slept) std::this_thread::sleep_for(100ms);
    }
  });

  std::set<std::string> accepted;
  std::vector<double> healthz_ms;
  size_t healthz_ok = 0, readyz_ok = 0;
  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 2000, .attempts = 3});
  for (int batch = 0; batch < 20; ++batch) {
    std::vector<JobSpec> jobs;
    for (int i = 0; i < 50; ++i) jobs.push_back({"h", "noop", "", fmt::format("h-{}-{}", batch, i), 0, 3});
    auto results = client.enqueue_batch(jobs);
    ASSERT_TRUE(results.has_value());
    for (const auto& r : *results) accepted.insert(r.id);
    const int64_t asked_us = steady_us();
    healthz_ok += http_get(http, "/healthz").status == 200 ? 1 : 0;
    healthz_ms.push_back(static_cast<double>(steady_us() - asked_us) / 1000.0);
    readyz_ok += http_get(http, "/readyz").status == 200 ? 1 : 0;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(healthz_ok, 20u) << "/healthz went unanswered beside the slow connections";
  EXPECT_EQ(readyz_ok, 20u);
  const size_t descriptors_during = open_descriptors(cluster.broker().pid());
  std::printf("[ flood    ] 1,000 slow HTTP connections: /healthz p50 %.1f ms, p99 %.1f ms (20 asks); broker "
              "descriptors %zu before, %zu during\n",
              percentile(healthz_ms, 50), percentile(healthz_ms, 99), descriptors_before, descriptors_during);
  EXPECT_LE(descriptors_during, descriptors_before + 2048 + 8) << "the front's connection limit, and a little slack";
  std::set<std::string> started;
  ASSERT_TRUE(eventually([&] {
    for (const auto& r : read_records(record)) started.insert(r.id);
    return started.size() >= accepted.size();
  }, 30s)) << "accepted " << accepted.size() << ", started " << started.size();

  // Every trickling connection is answered 408 and closed, whatever it sends.
  size_t timed_out = 0;
  for (size_t i = 1; i < flood.size(); i += 2) {
    std::string answer;
    char buffer[512];
    const int64_t give_up = steady_ms() + 15'000;
    while (steady_ms() < give_up) {
      const ssize_t n = ::recv(flood[i], buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) answer.append(buffer, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
      if (n < 0) std::this_thread::sleep_for(20ms);
    }
    timed_out += answer.starts_with("HTTP/1.1 408") ? 1 : 0;
  }
  trickling = false;
  trickle.join();
  EXPECT_EQ(timed_out, 500u) << "each trickling connection is answered 408 once its request took 5 s";
  for (int fd : flood) ::close(fd);
  EXPECT_EQ(http_get(http, "/metrics").status, 200);

  httplib::Client post("127.0.0.1", http);
  auto res = post.Post("/metrics", std::string(1 << 20, 'x'), "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413) << "a 1 MiB body is refused";
  EXPECT_TRUE(cluster.broker().running());
}
