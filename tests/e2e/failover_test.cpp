// Redis Sentinel: the broker finds the master through the sentinels and
// follows a fail-over without a restart of anything.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/sentinels.hpp"

namespace dueq::testing {
namespace {

using namespace std::chrono_literals;

// Rule: with min_replicas = 1, a SIGKILLed master loses no job a producer was
// told "accepted": after the sentinels promote a replica the broker (same
// process) writes to the new master, the workers and the producer (same
// processes) go on, every accepted job runs once at or after its due time,
// and the audit is clean.
TEST(Failover, AfterTheSentinelsPromoteAReplicaEveryAcceptedJobRunsAndTheFlowGoesOn) {
  TempDir dir("failover");
  Cluster cluster;
  RedisServer replica_a({"--replicaof", "127.0.0.1", std::to_string(cluster.redis().port())});
  RedisServer replica_b({"--replicaof", "127.0.0.1", std::to_string(cluster.redis().port())});
  for (auto* replica : {&replica_a, &replica_b})
    ASSERT_TRUE(eventually([&] { return replica->cli("INFO replication").find("master_link_status:up") != std::string::npos; }, 10s));
  Sentinels sentinels(3, cluster.redis().port());
  ASSERT_TRUE(eventually([&] { return sentinels.ready(2); }, 30s)) << sentinels.cli(0, "SENTINEL master mymaster");

  const auto config = dir / "broker.toml";
  std::ofstream(config) << "min_replicas = 1\nreplica_timeout = \"300ms\"\n";
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait();
  cluster.use_redis_url(sentinels.url());
  cluster.start_broker({"--config", config.string()});

  const auto record = dir / "starts.txt";
  cluster.start_example_worker("ha", 8, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));

  // One producer, one job per call, each retried with its id until it is
  // answered accepted or duplicate (both mean: in the store).
  std::mutex mutex;
  std::map<std::string, int64_t> accepted;  // id -> due ms
  std::vector<int64_t> accepted_at_ms;      // steady, in order
  std::atomic<bool> producing{true};
  std::thread producer([&] {
    Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 500, .attempts = 2});
    for (int n = 0; producing; ++n) {
      const std::string id = fmt::format("f-{}", n);
      const int64_t due = wall_ms() + (n % 2 == 0 ? 0 : 300);
      while (producing) {
        auto result = client.enqueue(JobSpec{"ha", "noop", "", id, due, 0});
        if (result && (result->status == EnqueueResult::Status::accepted ||
                       result->status == EnqueueResult::Status::duplicate)) {
          std::lock_guard lock(mutex);
          accepted[id] = due;
          accepted_at_ms.push_back(steady_ms());
          break;
        }
        std::this_thread::sleep_for(20ms);
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  auto accepted_count = [&] {
    std::lock_guard lock(mutex);
    return accepted.size();
  };
  ASSERT_TRUE(eventually([&] { return accepted_count() >= 100; }, 20s));

  const int old_master = cluster.redis().port();
  const int64_t killed_at = steady_ms();
  cluster.redis().kill(SIGKILL);
  ASSERT_TRUE(eventually([&] { const int p = sentinels.master_port(); return p != 0 && p != old_master; }, 30s))
      << "no fail-over; see " << sentinels.dir();
  const size_t at_kill = accepted_count();
  ASSERT_TRUE(eventually([&] { return accepted_count() >= at_kill + 100; }, 30s)) << "the flow did not resume";
  producing = false;
  producer.join();

  int64_t gap_ms = 0;
  {
    std::lock_guard lock(mutex);
    for (size_t i = 1; i < accepted_at_ms.size(); ++i)
      if (accepted_at_ms[i] >= killed_at) {
        gap_ms = accepted_at_ms[i] - std::max(accepted_at_ms[i - 1], killed_at);
        break;
      }
  }
  std::printf("fail-over gap: %lld ms from the SIGKILL to the next accepted job (sentinel down-after %d ms); %zu jobs accepted\n",
              static_cast<long long>(gap_ms), Sentinels::kDownAfterMs, accepted.size());

  ASSERT_TRUE(eventually([&] { return read_records(record).size() >= accepted.size(); }, 30s))
      << read_records(record).size() << " of " << accepted.size() << " accepted jobs ran";
  std::set<std::string> ran;
  for (const auto& r : read_records(record)) {
    EXPECT_TRUE(ran.insert(r.id).second || r.attempt > 1) << r.id << " ran twice in one attempt";
    auto it = accepted.find(r.id);
    if (it != accepted.end()) {
      EXPECT_GE(r.start_us, it->second * 1000) << r.id << " started early";
    }
  }
  for (const auto& [id, due] : accepted) EXPECT_TRUE(ran.contains(id)) << "accepted job " << id << " never ran";
  auto audit = run_dueq(cluster.endpoint(), "audit --queue ha");
  EXPECT_EQ(audit.code, 0) << audit.out;
}

}  // namespace
}  // namespace dueq::testing
