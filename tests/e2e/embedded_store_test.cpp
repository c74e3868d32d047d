// The embedded store: a broker given no Redis address runs its own
// redis-server under its data directory, brings it back when it dies, stops
// it when the broker goes, and keeps the jobs across broker restarts.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
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
  explicit EmbeddedBroker(const std::filesystem::path& dir, std::vector<std::string> env = {})
      : dir_(dir), env_(std::move(env)), port_(free_port()) {}
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
        (dir_ / "broker.log").string(), env_);
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
  std::vector<std::string> env_;
  int port_;
  std::unique_ptr<Process> broker_;
};

bool process_alive(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

// A `redis-server` first in PATH that counts its starts in DIR/starts and
// behaves by number: the 2nd exits 1 at once (a binary that fails once), the
// 4th writes its pid to DIR/slow.pid and waits 5 s before it becomes Redis,
// so the test can kill it before it serves; every other start is Redis.
std::string write_flaky_redis(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::string real = "/usr/bin/redis-server";
  const std::string script = fmt::format(R"(#!/bin/sh
echo x >> '{0}/starts'
n=$(wc -l < '{0}/starts')
if [ "$n" -eq 2 ]; then echo "flaky redis-server: failing start $n" >&2; exit 1; fi
if [ "$n" -eq 4 ]; then echo $$ > '{0}/slow.pid.tmp'; mv '{0}/slow.pid.tmp' '{0}/slow.pid'; sleep 5; fi
exec {1} "$@"
)", dir.string(), real);
  const auto path = dir / "redis-server";
  {
    std::ofstream out(path);
    out << script;
  }
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return "PATH=" + dir.string() + ":" + std::getenv("PATH");
}

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

// Redis dies again before it serves (its binary fails once; a start is
// killed before it serves, right after a kill): the supervisor restarts it
// every time, with one log line per death, and no job is lost.
TEST(EmbeddedStore, ARedisThatDiesBeforeItServesIsStartedAgainEveryTime) {
  TempDir dir("embedded");
  const auto bin_dir = dir.path() / "flaky-bin";
  EmbeddedBroker broker(dir.path(), {write_flaky_redis(bin_dir)});
  ASSERT_TRUE(broker.start()) << broker.log();
  const int64_t due = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count() + 3'600'000;
  {
    Client client(broker.endpoint());
    std::vector<JobSpec> jobs;
    for (int i = 0; i < 50; ++i) jobs.push_back({"later", "noop", "", fmt::format("l-{}", i), due, 0});
    auto results = client.enqueue_batch(jobs);
    ASSERT_TRUE(results.has_value());
    for (const auto& r : *results) ASSERT_EQ(r.status, EnqueueResult::Status::accepted);
  }
  auto starts = [&] { return count_of(read_file(bin_dir / "starts"), "x"); };
  ASSERT_EQ(starts(), 1U);

  // Kill 1: the next start fails (exit 1), the one after serves.
  ASSERT_EQ(::kill(broker.redis_pid(), SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return count_of(broker.log(), "serves again") == 1; }, 30s)) << broker.log();
  EXPECT_EQ(starts(), 3U);
  EXPECT_GE(count_of(broker.log(), "failing start 2"), 1U) << "the failed start's own words are logged\n" << broker.log();

  // Kill 2, and kill 3 of the start that follows it, before it serves.
  ASSERT_EQ(::kill(broker.redis_pid(), SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(bin_dir / "slow.pid"); }, 30s)) << broker.log();
  const pid_t slow = static_cast<pid_t>(std::atoi(read_file(bin_dir / "slow.pid").c_str()));
  ASSERT_GT(slow, 0);
  ASSERT_EQ(::kill(slow, SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return count_of(broker.log(), "serves again") == 2; }, 30s)) << broker.log();
  EXPECT_EQ(starts(), 5U);
  // One line per death: the two kills of serving Redis, the failed start, the start killed while it started.
  EXPECT_EQ(count_of(broker.log(), "was killed by signal 9; starting it again"), 2U) << broker.log();
  EXPECT_EQ(count_of(broker.log(), "exited with 1 at start"), 1U) << broker.log();
  EXPECT_EQ(count_of(broker.log(), "was killed by signal 9 at start"), 1U) << broker.log();

  ASSERT_TRUE(eventually([&] { auto s = broker.stats("later"); return s && s->scheduled == 50; }, 30s))
      << "the broker serves again and holds every job";
  EXPECT_TRUE(broker.process().running());
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
