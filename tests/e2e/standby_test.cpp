// Standby brokers: two brokers on one store, one leads and the other takes
// over when it dies, stops, or steps down; workers and producers given both
// endpoints follow by themselves.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/link_proxy.hpp"
#include "tests/support/steady_producer.hpp"

namespace dueq::testing {
namespace {

using namespace std::chrono_literals;

// A second broker on the cluster's Redis, standing by.
struct StandbyBroker {
  explicit StandbyBroker(Cluster& cluster)
      : endpoint("tcp://127.0.0.1:" + std::to_string(free_port())), log(cluster.dir() / "standby.log"),
        process({bin("dueq-broker"), "--redis", cluster.redis().url(), "--listen", endpoint, "--log-level", "info"},
                log.string()) {}

  bool says(const std::string& needle) const { return read_file(log).find(needle) != std::string::npos; }

  std::string endpoint;
  std::filesystem::path log;
  Process process;
};

enum class LeaderLoss { sigkill, sigstop };

struct TakeoverRun {
  int64_t accept_gap_ms = -1;  // the longest pause between two jobs accepted, the later one after the loss
  int64_t start_gap_ms = -1;   // the same for two jobs started
  size_t accepted = 0;
  size_t lost = 0;
  size_t reruns = 0;
};

// Broker A leads, broker B stands by; one example worker and one producer
// of single jobs are given both endpoints. A is SIGKILLed (or SIGSTOPped,
// then SIGCONTed once B serves) during the flow. Checks that B serves
// without a restart of the worker or the producer, that no job starts
// early or is lost, and that the audit is clean.
TakeoverRun run_takeover(LeaderLoss loss) {
  TakeoverRun run;
  Cluster cluster;
  StandbyBroker standby(cluster);
  EXPECT_TRUE(eventually([&] { return standby.says("standing by"); }, 20s)) << "see " << standby.log;
  const std::string both = cluster.endpoint() + "," + standby.endpoint;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_worker({bin("dueq-example-worker"), "--broker", both, "--queue", "ha", "--concurrency", "8", "--record",
                        record.string()});
  EXPECT_TRUE(cluster.wait_for_workers(1));

  SteadyProducer producer(both, [](int n) {
    return JobSpec{"ha", "noop", "", fmt::format("s-{}", n), wall_ms() + (n % 2 == 0 ? 0 : 300), 0};
  }, 5ms);
  EXPECT_TRUE(eventually([&] { return producer.accepted() >= 100; }, 20s));

  const int64_t lost_at = steady_ms();
  const int64_t lost_at_wall_us = wall_us();
  cluster.broker().signal(loss == LeaderLoss::sigkill ? SIGKILL : SIGSTOP);
  const size_t at_loss = producer.accepted();
  EXPECT_TRUE(eventually([&] { return producer.accepted() >= at_loss + 100; }, 30s)) << "the flow did not resume";
  EXPECT_TRUE(standby.says("leading with epoch 2"));
  if (loss == LeaderLoss::sigstop) {
    cluster.broker().signal(SIGCONT);
    // The old leader finds it was deposed and stands by as a fresh broker.
    EXPECT_TRUE(eventually([&] { return cluster.log_count("no longer leads") == 1; }, 10s));
    EXPECT_TRUE(eventually([&] { return cluster.log_count("standing by: another broker leads at " + standby.endpoint) == 1; }, 10s));
  }
  producer.stop();

  // The outage: the longest pause between two jobs accepted, the later
  // one after the loss.
  run.accept_gap_ms = producer.longest_gap_after(lost_at);
  run.accepted = producer.accepted();

  Client leader(standby.endpoint, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  eventually([&] { return producer.all_started(read_records(record)); }, 15s);
  EXPECT_TRUE(eventually([&] {
    auto all = leader.stats();
    if (!all) return false;
    for (const auto& q : *all)
      if (q.queue == "ha") return q.scheduled == 0 && q.waiting == 0 && q.in_flight == 0;
    return false;
  }, 30s));
  const auto tally = producer.tally(read_records(record));
  run.lost = tally.lost;
  run.reruns = tally.reruns;
  std::vector<int64_t> starts;
  for (const auto& r : read_records(record)) starts.push_back(r.start_us);
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i)
    if (starts[i] >= lost_at_wall_us) run.start_gap_ms = std::max(run.start_gap_ms, (starts[i] - starts[i - 1]) / 1000);
  auto audit = run_dueq(standby.endpoint, "audit --queue ha");
  EXPECT_EQ(audit.code, 0) << audit.out;
  EXPECT_TRUE(cluster.worker(0).running()) << "the worker was not to be restarted";
  // Every write to the queue from now on must carry the new leader's epoch.
  EXPECT_EQ(cluster.redis().cli("GET dueq:{ha}:epoch"), "2");
  std::printf("%s of the leader: no job accepted for %lld ms, none started for %lld ms (leader_lease 2000 ms); "
              "%zu accepted, %zu lost, %zu ran again\n",
              loss == LeaderLoss::sigkill ? "SIGKILL" : "SIGSTOP", static_cast<long long>(run.accept_gap_ms),
              static_cast<long long>(run.start_gap_ms), run.accepted, run.lost, run.reruns);
  return run;
}

// Rule: when the leader dies, the standby serves the same workers and
// producers, and no accepted job is lost.
TEST(Standby, WhenTheLeaderIsKilledTheStandbyServesAndNoAcceptedJobIsLost) {
  const TakeoverRun run = run_takeover(LeaderLoss::sigkill);
  EXPECT_GE(run.accepted, 200u);
  EXPECT_EQ(run.lost, 0u);
  EXPECT_GE(run.accept_gap_ms, 0);
}

// Rule: a leader stopped past its lease is deposed; when it wakes it writes
// nothing more (its epoch is fenced) and stands by.
TEST(Standby, ALeaderThatWakesUpAfterItsStandbyTookOverWritesNothingAndStandsBy) {
  const TakeoverRun run = run_takeover(LeaderLoss::sigstop);
  EXPECT_GE(run.accepted, 200u);
  EXPECT_EQ(run.lost, 0u);
}

// Rule: a take-over is never slower than the lease, whatever the number of
// queues: the new leader renews its lease while it prepares them, so one
// loss of the leader makes one new leader, not a loop of brokers that
// depose each other while they start. 20,000 queues, every byte to and
// from Redis 1 ms late (LinkProxy); the killed leader is started again at
// once (as its supervisor would) and stands by.
TEST(Standby, WithTwentyThousandQueuesBehindASlowLinkOneLossMakesOneNewLeader) {
  RedisServer redis;
  {
    constexpr int kQueues = 20'000, kPerLine = 1'000;
    const auto script = redis.dir() / "queues.txt";
    std::ofstream out(script);
    for (int q = 0; q < kQueues; q += kPerLine) {
      out << "SADD dueq:{leader}:queues";
      for (int n = q; n < q + kPerLine; ++n) out << fmt::format(" bulk-{:05}", n);
      out << "\n";
    }
    out.close();
    redis.cli("< " + script.string());
    ASSERT_EQ(redis.cli("SCARD dueq:{leader}:queues"), "20000");
  }
  LinkProxy link(redis.port(), 1ms);
  const auto dir = make_temp_dir("takeover");
  {
    std::ofstream config(dir / "broker.toml");
    // A 4 s leader lease, not the default 2 s: on a loaded 2-core machine a
    // sanitized broker's first turns over 20,000 queues took over 2 s once
    // (perf tracing beside the suite), and a lease lost to a starved loop
    // is fenced and safe but is not what this test is about. The take-over
    // itself (10 to 16 s there) still renews between its chunks.
    config << "max_queues = 25000\nleader_lease = \"4s\"\n";
  }
  auto broker = [&](const std::string& endpoint, const std::string& log) {
    return std::make_unique<Process>(std::vector<std::string>{bin("dueq-broker"), "--redis", link.url(), "--listen", endpoint,
                                                              "--config", (dir / "broker.toml").string(), "--log-level", "info"},
                                     (dir / log).string());
  };
  const std::string a_endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
  const std::string b_endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto says = [&](const std::string& log, const std::string& needle) { return read_file(dir / log).find(needle) != std::string::npos; };
  auto a = broker(a_endpoint, "a.log");
  ASSERT_TRUE(eventually([&] { return says("a.log", "known queues"); }, 60s)) << read_file(dir / "a.log");
  auto b = broker(b_endpoint, "b.log");
  ASSERT_TRUE(eventually([&] { return says("b.log", "standing by"); }, 20s)) << read_file(dir / "b.log");

  const std::string both = a_endpoint + "," + b_endpoint;
  const auto record = dir / "starts.txt";
  Process worker({bin("dueq-example-worker"), "--broker", both, "--queue", "ha", "--concurrency", "4", "--record",
                  record.string()},
                 (dir / "worker.log").string());
  // Up to 2 minutes for a take-over of 20,000 queues on a loaded machine
  // (the time it took is printed, not asserted).
  Client client(both, ClientOptions{.timeout_ms = 1000, .attempts = 120});
  std::set<std::string> accepted;
  auto enqueue = [&](const std::string& id, int64_t due_ms) {
    auto r = client.enqueue(JobSpec{"ha", "noop", "", id, due_ms, 0});
    ASSERT_TRUE(r) << id << ": " << r.error().message;
    accepted.insert(id);
  };
  for (int n = 0; n < 20; ++n) enqueue(fmt::format("before-{}", n), wall_ms() + (n % 2 == 0 ? 0 : 3'000));

  a->signal(SIGKILL);
  a->wait();
  const int64_t lost_at = steady_ms();
  a = broker(a_endpoint, "a2.log");
  enqueue("first-after", 0);
  const int64_t served_after_ms = steady_ms() - lost_at;
  for (int n = 0; n < 20; ++n) enqueue(fmt::format("after-{}", n), wall_ms() + (n % 2 == 0 ? 0 : 1'000));

  ASSERT_TRUE(eventually([&] {
    std::set<std::string> ran;
    for (const auto& r : read_records(record)) ran.insert(r.id);
    return std::includes(ran.begin(), ran.end(), accepted.begin(), accepted.end());
  }, 60s)) << "not every accepted job ran; see " << dir;
  // One of the two leads with epoch 2 (the restarted one may win the race
  // for the lapsed lease), the other stands by naming it, and past a few
  // leases after that no third epoch was ever taken.
  const bool b_leads = says("b.log", "leading with epoch 2");
  const std::string leader_log = b_leads ? "b.log" : "a2.log", standby_log = b_leads ? "a2.log" : "b.log";
  EXPECT_TRUE(says(leader_log, "leading with epoch 2")) << read_file(dir / leader_log);
  ASSERT_TRUE(eventually([&] {
    return says(standby_log, "standing by: another broker leads at " + (b_leads ? b_endpoint : a_endpoint));
  }, 20s)) << read_file(dir / standby_log);
  // Three leases' worth of renewals by the leader (each raises the lease's
  // time to live): a leader that lost its lease would be succeeded by then.
  int renewals = 0;
  int64_t last_ttl = -1;
  ASSERT_TRUE(eventually([&] {
    const int64_t ttl = std::stoll("0" + redis.cli("PTTL dueq:{leader}:holder"));
    if (last_ttl >= 0 && ttl > last_ttl) ++renewals;
    last_ttl = ttl;
    return renewals >= 12;
  }, 30s, 50ms)) << renewals << " renewals seen";
  EXPECT_FALSE(says(leader_log, "standing by again")) << read_file(dir / leader_log);
  EXPECT_FALSE(says(leader_log, "no longer leads")) << read_file(dir / leader_log);
  EXPECT_EQ(redis.cli("GET dueq:{leader}:epochs"), "2");
  EXPECT_TRUE(b->running());
  EXPECT_TRUE(a->running());
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
  std::printf("20,000 queues behind a 1 ms link: the standby served %lld ms after the leader's SIGKILL "
              "(leader_lease 4000 ms)\n",
              static_cast<long long>(served_after_ms));
}

// Rule: no write of a deposed leader lands, a queue's creation included.
// The leader's bytes to Redis are held in its link (LinkProxy::hold) while
// it takes an enqueue into a queue nobody knows; the standby, connected
// directly, takes over once the lease lapses; then the held bytes arrive.
// They create nothing, and the producer's retry at the new leader is a new
// job that runs.
TEST(Standby, ARoundOfADeposedLeaderHeldInItsLinkWritesNothingWhenItArrives) {
  RedisServer redis;
  LinkProxy link(redis.port(), 0us);
  const auto dir = make_temp_dir("held");
  const std::string a_endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
  const std::string b_endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto says = [&](const std::string& log, const std::string& needle) { return read_file(dir / log).find(needle) != std::string::npos; };
  Process a({bin("dueq-broker"), "--redis", link.url(), "--listen", a_endpoint, "--log-level", "info"}, (dir / "a.log").string());
  ASSERT_TRUE(eventually([&] { return says("a.log", "known queues"); }, 20s)) << read_file(dir / "a.log");
  Process b({bin("dueq-broker"), "--redis", redis.url(), "--listen", b_endpoint, "--log-level", "info"}, (dir / "b.log").string());
  ASSERT_TRUE(eventually([&] { return says("b.log", "standing by"); }, 20s)) << read_file(dir / "b.log");

  link.hold();
  Client at_a(a_endpoint, ClientOptions{.timeout_ms = 1000, .attempts = 1});
  EXPECT_FALSE(at_a.enqueue(JobSpec{"created-late", "noop", "", "late-1", 0, 0})) << "its reply needs Redis";
  ASSERT_TRUE(eventually([&] { return says("b.log", "known queues"); }, 20s)) << read_file(dir / "b.log");
  ASSERT_GT(link.held_bytes(), 0u);
  auto refusals = [&] {
    const std::string stats = redis.cli("INFO errorstats");
    const auto at = stats.find("errorstat_ERR:count=");
    return at == std::string::npos ? 0 : std::stoll(stats.substr(at + 20));
  };
  const auto refused_before = refusals();
  link.release();
  // The held rounds reach Redis; the one with the enqueue is refused ("ERR
  // dueq fenced"). A leader slowed down enough (a sanitized build on a
  // loaded machine) may not have sent that round before the hold: it learns
  // it was deposed from its renewal and drops the enqueue unsent.
  ASSERT_TRUE(eventually([&] { return link.held_bytes() == 0 && (refusals() > refused_before || says("a.log", "deposed")); }, 10s))
      << link.held_bytes() << " bytes held";
  std::printf("[ held     ] the held enqueue was %s\n", refusals() > refused_before ? "refused by the fence" : "never sent");
  EXPECT_EQ(redis.cli("SISMEMBER dueq:{leader}:queues created-late"), "0");
  EXPECT_EQ(redis.cli("KEYS 'dueq:{created-late}:*'"), "") << "a deposed leader's round created the queue";

  Process worker({bin("dueq-example-worker"), "--broker", b_endpoint, "--queue", "created-late", "--concurrency", "2",
                  "--record", (dir / "starts.txt").string()},
                 (dir / "worker.log").string());
  Client at_b(b_endpoint, ClientOptions{.timeout_ms = 2000, .attempts = 3});
  auto retried = at_b.enqueue(JobSpec{"created-late", "noop", "", "late-1", 0, 0});
  ASSERT_TRUE(retried) << retried.error().message;
  EXPECT_EQ(retried->status, EnqueueResult::Status::accepted);
  EXPECT_TRUE(eventually([&] { return read_records(dir / "starts.txt").size() == 1; }, 20s));
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

// Rule: a lone broker killed and started again stands by until its earlier
// run's lease lapses, and says so: it does not name its own endpoint as
// "the leader" (clients would log that and walk to it again).
TEST(Standby, ARestartedLoneBrokerSaysItWaitsForItsEarlierRunsLease) {
  Cluster cluster;
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait();
  Process again({bin("dueq-broker"), "--redis", cluster.redis().url(), "--listen", cluster.endpoint(), "--log-level", "info"},
                (cluster.dir() / "again.log").string());
  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 300, .attempts = 1});
  std::string said;
  ASSERT_TRUE(eventually([&] {
    auto r = client.enqueue(JobSpec{"q", "t", "", "during-the-gap", 0, 0});
    if (!r) said = r.error().code + ": " + r.error().message;
    return said.find("this broker restarted") != std::string::npos;
  }, 10s)) << said;
  EXPECT_EQ(said.find("the leader is at"), std::string::npos) << said;
  EXPECT_TRUE(said.starts_with("not_leader")) << said;
  ASSERT_TRUE(eventually([&] { auto r = client.enqueue(JobSpec{"q", "t", "", "after", 0, 0}); return r.has_value(); }, 10s));
}

// Rule: a standby never answers "accepted": it refuses every request with
// "not_leader" and writes nothing; when the leader stops cleanly it gives
// its lease up and the standby leads at once.
TEST(Standby, AStandbyRefusesEveryRequestAndLeadsAtOnceWhenTheLeaderStops) {
  Cluster cluster;
  StandbyBroker standby(cluster);
  ASSERT_TRUE(eventually([&] { return standby.says("standing by: another broker leads at " + cluster.endpoint()); }, 20s))
      << "see " << standby.log;
  Client client(standby.endpoint, ClientOptions{.timeout_ms = 2000, .attempts = 1, .follow_leader = false});
  auto refused = client.enqueue(JobSpec{"q", "t", "", "refused-1", 0, 0});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, "not_leader");
  EXPECT_NE(refused.error().message.find("the leader is at " + cluster.endpoint()), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(cluster.queue_keys(), "");
  // The CLI given only the standby follows it to the leader it names.
  auto cli = run_dueq(standby.endpoint, "enqueue --queue q --type t --id via-standby");
  EXPECT_EQ(cli.code, 0) << cli.out;
  EXPECT_EQ(cluster.redis().cli("HEXISTS dueq:{q}:jobs via-standby"), "1");
  EXPECT_EQ(run_dueq(standby.endpoint, "stats").code, 0);

  const int64_t stopped_at = steady_ms();
  cluster.broker().signal(SIGTERM);
  EXPECT_EQ(cluster.broker().wait(), 0);
  EXPECT_TRUE(cluster.log_count("gave up the leader lease") == 1);
  int64_t accepted_after_ms = -1;
  EXPECT_TRUE(eventually([&] {
    auto r = client.enqueue(JobSpec{"q", "t", "", "after-1", 0, 0});
    if (r && r->status == EnqueueResult::Status::accepted) accepted_after_ms = steady_ms() - stopped_at;
    return r.has_value();
  }, 10s));
  std::printf("the standby accepted a job %lld ms after SIGTERM of the leader\n", static_cast<long long>(accepted_after_ms));
  EXPECT_EQ(cluster.redis().cli("HEXISTS dueq:{q}:jobs refused-1"), "0");
  EXPECT_EQ(cluster.redis().cli("HEXISTS dueq:{q}:jobs after-1"), "1");
}

}  // namespace
}  // namespace dueq::testing
