// The event loop's own rules, with a broker running in this process (so its
// clock can be stepped) or as a process, a real Redis and real workers.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "broker/broker.hpp"
#include "common/clock.hpp"
#include "common/cron.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

// The system clock with a wall clock the test can step; the steady clock
// runs on untouched, as it does when NTP or an operator steps the time.
class SteppedClock final : public Clock {
 public:
  int64_t wall_us() const override { return dueq::wall_us() + offset_us_.load(); }
  int64_t steady_ms() const override { return dueq::steady_ms(); }
  void step_ms(int64_t ms) { offset_us_ += ms * 1000; }

 private:
  std::atomic<int64_t> offset_us_{0};
};


// A dueq-broker inside the test process, logging into a string.
class InProcessBroker {
 public:
  InProcessBroker(const RedisServer& redis, const Clock& clock, int port, int64_t worker_timeout_ms = 0)
      : log_sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(log_)) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("broker", log_sink_));
    broker::BrokerConfig config;
    if (worker_timeout_ms > 0) config.worker_timeout_ms = worker_timeout_ms;
    config.redis_url = redis.url();
    config.listen = "tcp://127.0.0.1:" + std::to_string(port);
    broker_ = std::make_unique<broker::Broker>(config, metrics_, admin_gateway_, clock);
    if (::pipe(stop_pipe_) != 0) throw std::runtime_error("pipe");
    if (auto ok = broker_->start(stop_pipe_[0]); !ok || *ok != broker::StartEnd::serving) throw std::runtime_error("broker did not start");
    thread_ = std::thread([this] { (void)broker_->run(stop_pipe_[0]); });
  }
  ~InProcessBroker() {
    // run() reads one signalfd_siginfo-sized record from its signal fd.
    const std::string record(128, '\0');
    [[maybe_unused]] auto n = ::write(stop_pipe_[1], record.data(), record.size());
    thread_.join();
    broker_.reset();
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test"));
  }
  std::string log() {
    log_sink_->flush();
    return log_.str();
  }

 private:
  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> log_sink_;
  broker::Metrics metrics_;
  broker::AdminGateway admin_gateway_;
  std::unique_ptr<broker::Broker> broker_;
  int stop_pipe_[2] = {-1, -1};
  std::thread thread_;
};

size_t starts_of(const std::filesystem::path& record, const std::string& id) {
  size_t n = 0;
  for (const auto& s : read_records(record)) n += s.id == id;
  return n;
}

}  // namespace

// Liveness and lease deadlines are measured on the steady clock: a wall
// clock step of an hour either way while a job runs declares no worker dead,
// expires no lease and re-delivers nothing.
TEST(BrokerLoop, AWallClockStepDeclaresNoWorkerDeadAndExpiresNoLease) {
  RedisServer redis;
  SteppedClock clock;
  const int port = free_port();
  InProcessBroker broker(redis, clock, port);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  const TempDir dir("clock");
  const auto record = dir / "starts.txt";
  Process worker({bin("dueq-example-worker"), "--broker", endpoint, "--queue", "q", "--concurrency", "2", "--record",
                  record.string()},
                 (dir / "worker.log").string());

  Client client(endpoint);
  auto long_job = client.enqueue(JobSpec{"q", "sleep", "5000", "long", 0, 1});
  ASSERT_TRUE(long_job && long_job->status == EnqueueResult::Status::accepted);
  ASSERT_TRUE(eventually([&] { return starts_of(record, "long") == 1; }, 10s));

  clock.step_ms(3'600'000);  // an hour ahead: every lease and every heartbeat looks an hour old
  std::this_thread::sleep_for(1500ms);
  clock.step_ms(-7'200'000);  // an hour behind
  std::this_thread::sleep_for(1500ms);
  clock.step_ms(3'600'000);
  auto short_job = client.enqueue(JobSpec{"q", "noop", "", "short", 0, 1});
  ASSERT_TRUE(short_job && short_job->status == EnqueueResult::Status::accepted);

  auto done = [&] {
    auto s = client.stats();
    return s && !s->empty() && (*s)[0].done == 2;
  };
  ASSERT_TRUE(eventually(done, 15s)) << broker.log();
  EXPECT_EQ(starts_of(record, "long"), 1u) << "the running job was delivered again";
  EXPECT_EQ(starts_of(record, "short"), 1u);
  const std::string log = broker.log();
  EXPECT_EQ(log.find("stopped heartbeating"), std::string::npos) << log;
  EXPECT_EQ(log.find("expired leases"), std::string::npos) << log;
  auto stats = client.stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ((*stats)[0].retried, 0);
  EXPECT_EQ((*stats)[0].dead, 0);
}

namespace {

// Leader L1 (this host's clock) runs 4 jobs of one attempt each; it is
// SIGKILLed and L2, whose wall clock is `offset_ms` off, takes over and
// adopts the running jobs (extends their leases); L2 stops and L3 (this
// host's clock again) takes over. Lease deadlines written by any of them
// must mean the same to the next: no running job is reclaimed.
void run_clock_skewed_successor(int64_t offset_ms) {
  RedisServer redis;
  const TempDir dir("clock");
  const int first_port = free_port(), second_port = free_port();
  const std::string first = fmt::format("tcp://127.0.0.1:{}", first_port);
  const std::string second = fmt::format("tcp://127.0.0.1:{}", second_port);
  // A successor gives the running jobs it adopts worker_timeout +
  // delivery_timeout for their worker to say HELLO to it (failure-modes.md).
  // Under the sanitized suite's load a worker that has to look for the new
  // leader past a dead endpoint can take longer than the default 3.5 s, and
  // its jobs are then delivered again, which this test is not about: its
  // brokers give 7 s (worker_timeout 5 s, the most the 10 s lease_ttl allows).
  auto leader = [&](const std::string& name) {
    return std::make_unique<Process>(std::vector<std::string>{bin("dueq-broker"), "--redis", redis.url(), "--listen", first,
                                                              "--worker-timeout", "5s"},
                                     (dir / (name + ".log")).string());
  };
  auto l1 = leader("l1");
  const auto record = dir / "starts.txt";
  Process worker({bin("dueq-example-worker"), "--broker", first + "," + second, "--queue", "q", "--concurrency", "4",
                  "--record", record.string()},
                 (dir / "worker.log").string());
  Client client(first, ClientOptions{.timeout_ms = 1000, .attempts = 20});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(client.enqueue(JobSpec{"q", "sleep", "14000", fmt::format("long-{}", i), 0, 1}));
  ASSERT_TRUE(eventually([&] { return read_records(record).size() == 4; }, 15s));
  auto deadlines = [&] { return redis.cli("ZRANGE dueq:{q}:leased 0 3 WITHSCORES"); };
  // L1 extended all 4 leases past the 2 s delivery deadline (lease_ttl 10 s):
  // only a clock that disagrees can find them expired at the take-over.
  auto extended_past = [&](int64_t ms) {
    std::istringstream lines(deadlines());
    std::string id, score;
    int n = 0;
    while (std::getline(lines, id) && std::getline(lines, score)) n += std::stoll(score) > ms;
    return n == 4;
  };
  ASSERT_TRUE(eventually([&] { return extended_past(wall_ms() + 5'000); }, 15s)) << deadlines();
  const std::string before = deadlines();

  l1->signal(SIGKILL);
  l1->wait();
  SteppedClock skewed;
  skewed.step_ms(offset_ms);
  {
    InProcessBroker l2(redis, skewed, second_port, 5'000);  // returns once it leads
    // L2 adopted the running jobs: the worker's heartbeats extended their leases.
    ASSERT_TRUE(eventually([&] { return deadlines() != before; }, 15s)) << l2.log();
    EXPECT_NE(l2.log().find("lease deadlines run on the store's clock"), std::string::npos) << l2.log();
    EXPECT_EQ(l2.log().find("expired leases"), std::string::npos) << l2.log();
  }
  auto l3 = leader("l3");
  ASSERT_TRUE(eventually([&] {
    auto s = client.stats();
    return s && !s->empty() && (*s)[0].done == 4;
  }, 40s)) << read_file(dir / "l3.log");
  auto stats = client.stats();
  ASSERT_TRUE(stats && !stats->empty());
  EXPECT_EQ((*stats)[0].dead, 0) << "a running job was reclaimed and charged its only attempt";
  EXPECT_EQ(read_records(record).size(), 4U) << "a running job was delivered again";
}

}  // namespace

// A successor whose wall clock runs ten minutes ahead of the store's takes
// the ticks between its predecessor's last (a minute ahead, the default
// lookahead) and its own "now" for missed while no broker led, and with
// misfire = skip drops them: once its clock is right those ticks never run.
// Judged on both clocks, it enqueues them instead.
TEST(BrokerLoop, ASuccessorTenMinutesAheadSkipsNoPeriodicTick) {
  RedisServer redis;
  const TempDir dir("cron-ahead");
  const int first_port = free_port(), second_port = free_port();
  const std::string first = fmt::format("tcp://127.0.0.1:{}", first_port);
  Process l1({bin("dueq-broker"), "--redis", redis.url(), "--listen", first}, (dir / "l1.log").string());
  ASSERT_TRUE(eventually([&] {
    return run_dueq(first, "--timeout 2s cron add tens --schedule '*/10 * * * * *' --queue q --type noop").code == 0;
  }, 20s)) << read_file(dir / "l1.log");
  Client client(first, ClientOptions{.timeout_ms = 1000, .attempts = 1});
  // L1 enqueued its ticks of the next minute.
  ASSERT_TRUE(eventually([&] {
    auto s = client.stats();
    return s && !s->empty() && (*s)[0].accepted >= 5;
  }, 20s)) << read_file(dir / "l1.log");
  l1.signal(SIGKILL);
  l1.wait();
  const int64_t killed_ms = wall_ms();
  SteppedClock ahead;
  ahead.step_ms(600'000);
  InProcessBroker l2(redis, ahead, second_port);
  Client successor(fmt::format("tcp://127.0.0.1:{}", second_port), ClientOptions{.timeout_ms = 1000, .attempts = 3});
  // Ticks two to three minutes from now on the store's clock: past the
  // minute L1 enqueued, within the ten minutes L2 is ahead.
  for (int64_t tick = (killed_ms / 10'000 + 12) * 10'000; tick <= killed_ms + 180'000; tick += 10'000) {
    const std::string id = cron_tick_id("tens", tick);
    EXPECT_TRUE(eventually([&] {
      auto job = successor.job(id, "q");
      return job && job->has_value();
    }, 10s)) << id << " was never enqueued\n" << l2.log();
  }
  EXPECT_EQ(l2.log().find("skipped (misfire skip)"), std::string::npos) << l2.log();
}

// Lease deadlines run on the store's clock (Redis TIME at take-over), not
// on the host's: successors 10 minutes ahead or behind reclaim nothing.
TEST(BrokerLoop, ASuccessorTenMinutesAheadReclaimsNoRunningJob) { run_clock_skewed_successor(600'000); }
TEST(BrokerLoop, ASuccessorTenMinutesBehindWritesNoLeaseItsSuccessorReclaims) { run_clock_skewed_successor(-600'000); }

// An audit of 31 queues takes seconds of Redis work; it runs on the admin
// thread, so producers are answered and workers stay alive meanwhile.
TEST(BrokerLoop, AnAuditOfManyQueuesLeavesTheLoopServingProducersAndWorkers) {
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("work", 4, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  // Every queue costs the audit a walk over its 32,768 schedule partitions;
  // four are enough to keep one audit running past several enqueues (the
  // loop below audits again while they are not), and each one more added
  // about 4 s to the sanitized suite.
  for (int i = 0; i < 4; ++i) {
    auto r = client.enqueue(JobSpec{"audited" + std::to_string(i), "noop", "", "", wall_ms() + 3'600'000, 0});
    ASSERT_TRUE(r && r->status == EnqueueResult::Status::accepted);
  }

  // Audits again until 5 enqueues were answered while one ran, however fast
  // this machine audits: the verdict is what the loop did meanwhile (no
  // worker lost, no job delivered twice), not how long anything took.
  size_t answered_during_audit = 0;
  int enqueued = 0;
  for (int audits = 0; answered_during_audit < 5 && audits < 20; ++audits) {
    auto audit = std::async(std::launch::async, [&] { return run_dueq(cluster.endpoint(), "audit"); });
    while (audit.wait_for(0ms) != std::future_status::ready) {
      auto r = client.enqueue(JobSpec{"work", "noop", "", "during" + std::to_string(enqueued++), 0, 1});
      ASSERT_TRUE(r && r->status == EnqueueResult::Status::accepted) << (r ? r->reason : r.error().message);
      // Answered while the audit still runs: the loop did not wait for it.
      if (audit.wait_for(0ms) != std::future_status::ready) ++answered_during_audit;
      std::this_thread::sleep_for(20ms);
    }
    const CliRun result = audit.get();
    EXPECT_EQ(result.code, 0) << result.out;
    EXPECT_NE(result.out.find("audit: clean"), std::string::npos) << result.out;
  }
  EXPECT_GE(answered_during_audit, 5u);
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("work"); return s && s->done == static_cast<int64_t>(read_records(record).size()) && s->done > 0; }, 10s));
  for (const auto& s : read_records(record)) EXPECT_EQ(s.attempt, 1) << s.id << " was delivered again";
  EXPECT_EQ(cluster.log_count("stopped heartbeating"), 0u);
}

namespace {
int64_t script_calls(RedisServer& redis) {
  const std::string stats = redis.cli("INFO commandstats");
  const auto at = stats.find("cmdstat_evalsha:calls=");
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + std::strlen("cmdstat_evalsha:calls=")));
}
}  // namespace

// Rule: an idle queue costs Redis no call a second. Each sweep's reply says
// when the earliest finished id left may go, so 1,000 queues with none are
// swept once at start and then every 30 s (before: 1,000 sweeps a second,
// forever, and the loop of a leader with 20,000 queues too busy to renew
// its lease on a loaded machine); and a done id is still forgotten once
// its retention is over, with nothing else flowing.
TEST(BrokerLoop, IdleQueuesCostNoSweepASecondAndADoneIdIsStillForgottenByTime) {
  Cluster cluster;
  const auto config = cluster.dir() / "broker.toml";
  std::ofstream(config) << "max_queues = 5000\n[queues.work]\ndone_retention = \"3s\"\nduplicate_window = \"1s\"\n";
  std::string add = "SADD dueq:{leader}:queues";
  for (int n = 0; n < 1'000; ++n) add += fmt::format(" idle-{:04}", n);
  cluster.redis().cli(add);
  cluster.start_broker({"--config", config.string()});  // knows them from its start

  // Quiet once the start's pass over every queue is done: fewer than 300
  // script calls in three seconds (the lease renewals, a few a second).
  // Sweeps due every second would come in each of those seconds.
  std::deque<int64_t> samples{script_calls(cluster.redis())};
  ASSERT_TRUE(eventually([&] {
    samples.push_back(script_calls(cluster.redis()));
    if (samples.size() > 4) samples.pop_front();
    return samples.size() == 4 && samples.back() - samples.front() < 300;
  }, 30s, 1s)) << "script calls keep coming: " << samples.back() - samples.front() << " in three seconds";

  cluster.start_example_worker("work", 1, (cluster.dir() / "starts.txt").string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  auto r = client.enqueue(JobSpec{"work", "noop", "", "x", 0, 0});
  ASSERT_TRUE(r && r->status == EnqueueResult::Status::accepted);
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("work"); return s && s->done == 1; }, 20s));
  ASSERT_TRUE(eventually([&] { return cluster.redis().cli("ZSCORE dueq:{work}:done x").empty(); }, 20s))
      << "the done id outlived its retention of 3 s";
}
