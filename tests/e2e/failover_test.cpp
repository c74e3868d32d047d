// Redis Sentinel: the broker finds the master through the sentinels and
// follows a fail-over without a restart of anything.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "broker/store/redis_client.hpp"
#include "broker/store/sentinel_watch.hpp"
#include "common/clock.hpp"
#include "common/redis_url.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/sentinels.hpp"
#include "tests/support/steady_producer.hpp"

namespace dueq::testing {
namespace {

using namespace std::chrono_literals;

// What one fail-over run saw: the gap between the SIGKILL of the master and
// the next job accepted, the jobs accepted, and those of them that never ran.
struct FailoverRun {
  int64_t gap_ms = -1;
  size_t accepted = 0;
  size_t lost = 0;
  size_t reruns = 0;  // jobs that ran more than once
};

// A master with two replicas and three sentinels, the broker reaching it
// through them, one worker, one producer of single jobs (each retried with
// its id until it is answered accepted or duplicate: both mean "in the
// store"). The master is SIGKILLed mid-flow (or, by a manual fail-over,
// demoted to a replica while it stays up); the same broker, worker and
// producer go on once the sentinels have promoted a replica. Checks what
// holds with or without WAIT: the flow resumes, no job starts early, and
// the audit is clean. A job may run again: a lease or result written on the
// old master and not replicated before the switch is not on the new one.
enum class MasterLoss { sigkill, manual_failover };

FailoverRun run_failover(int min_replicas, MasterLoss loss = MasterLoss::sigkill) {
  FailoverRun run;
  TempDir dir("failover");
  Cluster cluster;
  RedisServer replica_a({"--replicaof", "127.0.0.1", std::to_string(cluster.redis().port())});
  RedisServer replica_b({"--replicaof", "127.0.0.1", std::to_string(cluster.redis().port())});
  for (auto* replica : {&replica_a, &replica_b})
    EXPECT_TRUE(eventually([&] { return replica->cli("INFO replication").find("master_link_status:up") != std::string::npos; }, 10s));
  Sentinels sentinels(3, cluster.redis().port());
  if (!eventually([&] { return sentinels.ready(2); }, 30s)) {
    ADD_FAILURE() << "the sentinels did not find each other: " << sentinels.cli(0, "SENTINEL master mymaster");
    return run;
  }

  const auto config = dir / "broker.toml";
  std::ofstream(config) << "min_replicas = " << min_replicas << "\nreplica_timeout = \"300ms\"\n";
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait();
  cluster.use_redis_url(sentinels.url());
  cluster.start_broker({"--config", config.string()});
  const auto record = dir / "starts.txt";
  cluster.start_example_worker("ha", 8, record.string());
  if (!cluster.wait_for_workers(1)) {
    ADD_FAILURE() << "the worker did not join";
    return run;
  }

  SteadyProducer producer(cluster.endpoint(), [](int n) {
    return JobSpec{"ha", "noop", "", fmt::format("f-{}", n), wall_ms() + (n % 2 == 0 ? 0 : 300), 0};
  }, 5ms);
  EXPECT_TRUE(eventually([&] { return producer.accepted() >= 100; }, 20s));

  const int old_master = cluster.redis().port();
  const int64_t killed_at = steady_ms();
  if (loss == MasterLoss::sigkill) cluster.redis().kill(SIGKILL);
  else EXPECT_EQ(sentinels.cli(0, "SENTINEL FAILOVER mymaster"), "OK");
  EXPECT_TRUE(eventually([&] { const int p = sentinels.master_port(); return p != 0 && p != old_master; }, 30s))
      << "no fail-over; see " << sentinels.dir();
  const size_t at_kill = producer.accepted();
  EXPECT_TRUE(eventually([&] { return producer.accepted() >= at_kill + 100; }, 30s)) << "the flow did not resume";
  producer.stop();

  const std::vector<int64_t> accepted_at_ms = producer.accepted_times();
  for (size_t i = 1; i < accepted_at_ms.size(); ++i)
    if (accepted_at_ms[i] >= killed_at) {
      run.gap_ms = accepted_at_ms[i] - std::max(accepted_at_ms[i - 1], killed_at);
      break;
    }
  run.accepted = producer.accepted();
  // Every job that is in the store runs within a few seconds; what has not
  // run once the audit is clean and nothing is left was lost.
  eventually([&] { return producer.all_started(read_records(record)); }, 15s);
  EXPECT_TRUE(eventually([&] {
    auto s = cluster.stats("ha");
    return s && s->scheduled == 0 && s->waiting == 0 && s->in_flight == 0;
  }, 30s));
  const auto tally = producer.tally(read_records(record));
  run.lost = tally.lost;
  run.reruns = tally.reruns;
  auto audit = run_dueq(cluster.endpoint(), "audit --queue ha");
  EXPECT_EQ(audit.code, 0) << audit.out;
  std::printf("min_replicas %d: next job accepted %lld ms after the %s (sentinel down-after %d ms); "
              "%zu accepted, %zu of them lost, %zu ran again\n",
              min_replicas, static_cast<long long>(run.gap_ms),
              loss == MasterLoss::sigkill ? "SIGKILL of the master" : "manual fail-over", Sentinels::kDownAfterMs,
              run.accepted, run.lost, run.reruns);
  return run;
}

// Rule: with min_replicas = 1 a fail-over loses no job a producer was told
// "accepted".
TEST(Failover, WithMinReplicasAFailoverLosesNoAcceptedJobAndNothingIsRestarted) {
  const FailoverRun run = run_failover(1);
  EXPECT_GE(run.accepted, 200u);
  EXPECT_EQ(run.lost, 0u);
}

// Rule: a master demoted while it stays up (SENTINEL FAILOVER) is left:
// sentinel closes the broker's connection as it reconfigures it, and the
// broker asks the sentinels again and writes to the new master. (Jobs
// accepted on it between the promotion of a replica and its own demotion
// can be lost, WAIT or not: the replica that confirmed them is moved to the
// new master too; leases and results written then can make jobs run
// again. The run reports both.)
TEST(Failover, AMasterDemotedWhileUpIsLeftAndTheFlowGoesOn) {
  const FailoverRun run = run_failover(1, MasterLoss::manual_failover);
  EXPECT_GE(run.accepted, 200u);
}

// Without WAIT the jobs accepted in the replication lag before the crash
// can be lost: the run reports how many were (the rest of the rules hold).
TEST(Failover, WithoutMinReplicasAFailoverLosesAtMostTheReplicationLagAndTheRestRuns) {
  const FailoverRun run = run_failover(0);
  EXPECT_GE(run.accepted, 200u);
  EXPECT_LT(run.lost, run.accepted);
}

// Rule: the broker hears of a fail-over from the sentinels' +switch-master,
// with the new master's address, and not only when its next call fails;
// a sentinel that dies is replaced by the next one.
TEST(Failover, TheSentinelWatchReportsTheNewMasterOnceTheSentinelsSwitch) {
  RedisServer master;
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(master.port())});
  ASSERT_TRUE(eventually([&] { return replica.cli("INFO replication").find("master_link_status:up") != std::string::npos; }, 10s));
  Sentinels sentinels(3, master.port());
  ASSERT_TRUE(eventually([&] { return sentinels.ready(1); }, 30s)) << sentinels.cli(0, "SENTINEL master mymaster");
  auto address = parse_redis_url(sentinels.url());
  ASSERT_TRUE(address);
  broker::SentinelWatch watch(*address);
  watch.start();
  std::this_thread::sleep_for(500ms);  // subscribed to the first sentinel by then
  EXPECT_EQ(watch.take_announcement(), "");
  sentinels.kill(0);
  std::this_thread::sleep_for(1s);  // on the second one by then
  ASSERT_EQ(sentinels.cli(1, "SENTINEL FAILOVER mymaster"), "OK");
  std::string announced;
  EXPECT_TRUE(eventually([&] {
    if (announced.empty()) announced = watch.take_announcement();
    return !announced.empty();
  }, 30s));
  EXPECT_EQ(announced, fmt::format("127.0.0.1 {} 127.0.0.1 {}", master.port(), replica.port()));
  watch.stop();
}

// Rule: behind sentinels the broker never writes to a replica: a master
// turned replica under an open connection answers READONLY, the round fails
// as not applied, and the next connect refuses the server the sentinels
// still name until it is a master again.
TEST(Failover, AMasterTurnedReplicaIsLeftAtItsFirstReadonlyAndRefusedUntilItIsAMasterAgain) {
  RedisServer master;
  RedisServer elsewhere;
  Sentinels sentinels(3, master.port());
  ASSERT_TRUE(eventually([&] { return sentinels.ready(0); }, 30s)) << sentinels.cli(0, "SENTINEL master mymaster");
  auto address = parse_redis_url(sentinels.url());
  ASSERT_TRUE(address);
  broker::RedisClient redis(*address);
  redis.set_epoch(1);
  ASSERT_TRUE(redis.connect());
  ASSERT_TRUE(redis.call(broker::Command{"SADD", "dueq:queues", "before"}));

  ASSERT_EQ(master.cli(fmt::format("REPLICAOF 127.0.0.1 {}", elsewhere.port())), "OK");
  auto refused = redis.call(broker::Command{"SADD", "dueq:queues", "while-replica"});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("READONLY"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(redis.connected());
  auto reconnect = redis.connect();
  ASSERT_FALSE(reconnect);
  EXPECT_NE(reconnect.error().message.find("it says it is a slave"), std::string::npos) << reconnect.error().message;

  ASSERT_EQ(master.cli("REPLICAOF NO ONE"), "OK");
  ASSERT_TRUE(eventually([&] { return redis.connect().has_value(); }, 10s));
  ASSERT_TRUE(redis.call(broker::Command{"SADD", "dueq:queues", "after"}));
  EXPECT_EQ(master.cli("SISMEMBER dueq:queues after"), "1");
  EXPECT_EQ(master.cli("SISMEMBER dueq:queues while-replica"), "0");
}

}  // namespace
}  // namespace dueq::testing
