// The embedded store: a broker given no Redis address runs its own
// redis-server under its data directory, brings it back when it dies, stops
// it when the broker goes, and keeps the jobs across broker restarts.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

// A broker on its embedded store, with its logs beside the data directory.
class EmbeddedBroker {
 public:
  explicit EmbeddedBroker(const std::filesystem::path& dir) : dir_(dir), port_(free_port()) {}
  // Stops the broker, which stops its redis-server; one left behind by a
  // killed broker is killed here, before the test's directory goes (Redis
  // refuses to stop on SIGTERM when its final save fails, as it does once
  // its directory is gone).
  ~EmbeddedBroker() {
    const pid_t redis = redis_pid();
    if (broker_ && broker_->running()) {
      broker_->signal(SIGTERM);
      broker_->wait(60s);
    }
    if (redis > 0 && ::kill(redis, 0) == 0 && read_file("/proc/" + std::to_string(redis) + "/comm").starts_with("redis-server")) {
      ::kill(redis, SIGKILL);
      eventually([&] { return ::kill(redis, 0) != 0 || read_file("/proc/" + std::to_string(redis) + "/stat").find(" Z ") != std::string::npos; }, 10s);
    }
  }
  EmbeddedBroker(const EmbeddedBroker&) = delete;
  EmbeddedBroker& operator=(const EmbeddedBroker&) = delete;

  void launch() {
    broker_ = std::make_unique<Process>(
        std::vector<std::string>{bin("dueq-broker"), "--data-dir", data_dir().string(), "--listen", endpoint()},
        (dir_ / "broker.log").string());
  }
  // Starts the broker; true once it answers.
  bool start() {
    launch();
    Client probe(endpoint(), ClientOptions{.timeout_ms = 200, .attempts = 1});
    return eventually([&] { return probe.stats().has_value(); }, 30s);
  }
  std::filesystem::path data_dir() const { return dir_ / "data"; }
  std::string endpoint() const { return fmt::format("tcp://127.0.0.1:{}", port_); }
  Process& process() { return *broker_; }
  pid_t redis_pid() const { return static_cast<pid_t>(std::atoi(read_file(data_dir() / "redis.pid").c_str())); }
  std::string log() const { return read_file(dir_ / "broker.log"); }

  std::optional<QueueStats> stats(const std::string& queue) {
    Client client(endpoint(), ClientOptions{.timeout_ms = 2000, .attempts = 1});
    auto s = client.stats();
    if (!s) return std::nullopt;
    for (const auto& q : *s)
      if (q.queue == queue) return q;
    return QueueStats{};
  }

 private:
  std::filesystem::path dir_;
  int port_;
  std::unique_ptr<Process> broker_;
};

bool process_alive(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

}  // namespace

TEST(EmbeddedStore, ARedisKilledMidFlowIsStartedAgainAndNoAcceptedJobIsLost) {
  TempDir dir("embedded");
  EmbeddedBroker broker(dir.path());
  ASSERT_TRUE(broker.start()) << broker.log();
  const auto record = dir.path() / "starts.txt";
  Process worker({bin("dueq-example-worker"), "--broker", broker.endpoint(), "--queue", "flow", "--concurrency", "16",
                  "--record", record.string()},
                 (dir.path() / "worker.log").string());

  std::mutex accepted_mutex;
  std::set<std::string> accepted;
  // Stopped and joined on every way out (std::jthread).
  std::jthread producer([&](const std::stop_token& stop) {
    Client client(broker.endpoint(), ClientOptions{.timeout_ms = 500, .attempts = 1});
    for (int batch = 0; !stop.stop_requested(); ++batch) {
      std::vector<JobSpec> jobs;
      for (int i = 0; i < 50; ++i) jobs.push_back({"flow", "noop", "", fmt::format("e-{}-{}", batch, i), 0, 3});
      auto results = client.enqueue_batch(jobs);
      if (!results) continue;
      std::lock_guard lock(accepted_mutex);
      for (const auto& r : *results)
        if (r.status == EnqueueResult::Status::accepted || r.status == EnqueueResult::Status::duplicate)
          accepted.insert(r.id);
      std::this_thread::sleep_for(5ms);
    }
  });

  for (int cycle = 0; cycle < 2; ++cycle) {
    ASSERT_TRUE(eventually([&] { std::lock_guard lock(accepted_mutex); return accepted.size() > size_t{500} * static_cast<size_t>(cycle + 1); }, 30s));
    const pid_t first = broker.redis_pid();
    ASSERT_TRUE(process_alive(first));
    ASSERT_EQ(::kill(first, SIGKILL), 0);
    // The broker's supervisor starts a new redis-server on the same directory.
    ASSERT_TRUE(eventually([&] { const pid_t now = broker.redis_pid(); return now != first && process_alive(now); }, 20s))
        << broker.log();
    ASSERT_TRUE(eventually([&] { return count_of(broker.log(), "serves again") == static_cast<size_t>(cycle) + 1; }, 20s)) << broker.log();
    ASSERT_TRUE(broker.process().running());
  }
  const size_t before = accepted.size();
  ASSERT_TRUE(eventually([&] { std::lock_guard lock(accepted_mutex); return accepted.size() > before + 200; }, 30s))
      << "jobs are accepted again after the restarts";
  producer.request_stop();
  producer.join();

  // Every job a producer was told was accepted starts.
  std::set<std::string> started;
  ASSERT_TRUE(eventually([&] {
    for (const auto& r : read_records(record)) started.insert(r.id);
    return std::includes(started.begin(), started.end(), accepted.begin(), accepted.end());
  }, 60s)) << "accepted " << accepted.size() << ", started " << started.size();
  std::printf("[ embedded ] %zu jobs accepted across 2 Redis kills, all started\n", accepted.size());
}

TEST(EmbeddedStore, KeepsJobsAcrossBrokerRestartsAndRedisGoesWithTheBroker) {
  TempDir dir("embedded");
  const int64_t due = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count() + 3'600'000;
  {
    EmbeddedBroker broker(dir.path());
    ASSERT_TRUE(broker.start()) << broker.log();
    Client client(broker.endpoint());
    std::vector<JobSpec> jobs;
    for (int i = 0; i < 100; ++i) jobs.push_back({"later", "noop", "", fmt::format("l-{}", i), due, 0});
    ASSERT_TRUE(client.enqueue_batch(jobs).has_value());
    const pid_t redis = broker.redis_pid();
    broker.process().signal(SIGTERM);
    ASSERT_EQ(broker.process().wait(30s), 0);
    EXPECT_FALSE(process_alive(redis)) << "a stopped broker stops its redis-server";
  }
  {
    // A broker SIGKILLed takes its redis-server with it (the parent-death signal).
    EmbeddedBroker broker(dir.path());
    ASSERT_TRUE(broker.start()) << broker.log();
    EXPECT_EQ(broker.stats("later")->scheduled, 100);
    const pid_t redis = broker.redis_pid();
    broker.process().signal(SIGKILL);
    ASSERT_EQ(broker.process().wait(10s), 128 + SIGKILL);
    EXPECT_TRUE(eventually([&] { return !process_alive(redis); }, 30s));
  }
  {
    EmbeddedBroker broker(dir.path());
    ASSERT_TRUE(broker.start()) << broker.log();
    EXPECT_EQ(broker.stats("later")->scheduled, 100);
    // One broker per data directory.
    EmbeddedBroker second(dir.path());
    second.launch();
    EXPECT_EQ(second.process().wait(10s), 2);
    EXPECT_NE(read_file(dir.path() / "broker.log").find("in use by another dueq-broker"), std::string::npos);
    EXPECT_TRUE(broker.process().running());
    EXPECT_EQ(broker.stats("later")->scheduled, 100);
  }
}
