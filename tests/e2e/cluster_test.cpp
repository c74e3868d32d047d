// Redis Cluster: queues spread over the masters by their hash tag; the
// broker follows a master's fail-over to its replica.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/redis_cluster.hpp"

namespace dueq::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kQueues = 30;

// Rule: with queues spread over three masters, a master SIGKILLed mid-flow
// is replaced by one of its two replicas and, with min_replicas = 1 (the
// promoted one keeps a replica to confirm its writes), no job a producer
// was told "accepted" is lost; none starts early; every queue's audit is
// clean; nothing is restarted.
TEST(RedisCluster, QueuesSpreadOverTheMastersAndAKilledMastersReplicaTakesOverLosingNoAcceptedJob) {
  RedisCluster redis(3, 2);
  Cluster cluster;
  const auto config = cluster.dir() / "broker.toml";
  std::ofstream(config) << "min_replicas = 1\nreplica_timeout = \"300ms\"\n";
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait();
  cluster.use_redis_url(redis.url());
  cluster.start_broker({"--config", config.string()});

  const auto record = cluster.dir() / "starts.txt";
  std::vector<std::string> worker = {bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--concurrency", "16",
                                     "--record", record.string()};
  for (int q = 0; q < kQueues; ++q) worker.insert(worker.end(), {"--queue", fmt::format("c{}", q)});
  cluster.start_worker(worker);
  ASSERT_TRUE(cluster.wait_for_workers(1));

  std::mutex mutex;
  std::map<std::string, int64_t> accepted;  // id -> due ms
  std::map<std::string, std::string> queue_of;
  std::vector<int64_t> accepted_at_ms;
  std::atomic<bool> producing{true};
  std::thread producer([&] {
    Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 500, .attempts = 2});
    for (int n = 0; producing; ++n) {
      const std::string id = fmt::format("c-{}", n);
      const std::string queue = fmt::format("c{}", n % kQueues);
      const int64_t due = wall_ms() + (n % 2 == 0 ? 0 : 300);
      while (producing) {
        auto result = client.enqueue(JobSpec{queue, "noop", "", id, due, 0});
        if (result && (result->status == EnqueueResult::Status::accepted ||
                       result->status == EnqueueResult::Status::duplicate)) {
          std::lock_guard lock(mutex);
          accepted[id] = due;
          queue_of[id] = queue;
          accepted_at_ms.push_back(steady_ms());
          break;
        }
        std::this_thread::sleep_for(20ms);
      }
      std::this_thread::sleep_for(3ms);
    }
  });
  auto accepted_count = [&] {
    std::lock_guard lock(mutex);
    return accepted.size();
  };
  EXPECT_TRUE(eventually([&] { return accepted_count() >= 150; }, 20s));
  size_t masters_with_keys = 0;
  for (size_t i = 0; i < redis.size(); ++i)
    if (redis.node(i).cli("ROLE").starts_with("master") && redis.node(i).cli("DBSIZE") != "0") ++masters_with_keys;
  EXPECT_EQ(masters_with_keys, 3u) << "the queues' keys are to be spread over every master";

  RedisServer& victim = redis.master_of("dueq:{c0}:jobs");
  const int64_t killed_at = steady_ms();
  victim.kill(SIGKILL);
  const size_t at_kill = accepted_count();
  EXPECT_TRUE(eventually([&] { return accepted_count() >= at_kill + 150; }, 30s)) << "the flow did not resume";
  producing = false;
  producer.join();

  int64_t gap_ms = -1;
  for (size_t i = 1; i < accepted_at_ms.size(); ++i)
    if (accepted_at_ms[i] >= killed_at) gap_ms = std::max(gap_ms, accepted_at_ms[i] - accepted_at_ms[i - 1]);
  eventually([&] { return read_records(record).size() >= accepted.size(); }, 20s);
  std::set<std::string> ran;
  size_t reruns = 0, lost = 0;
  for (const auto& r : read_records(record)) {
    if (!ran.insert(r.id).second) ++reruns;
    auto it = accepted.find(r.id);
    if (it != accepted.end()) {
      EXPECT_GE(r.start_us, it->second * 1000) << r.id << " started early";
    }
  }
  for (const auto& [id, due] : accepted)
    if (!ran.contains(id)) ++lost;
  EXPECT_EQ(lost, 0u);
  for (int q = 0; q < kQueues; ++q) {
    auto audit = run_dueq(cluster.endpoint(), fmt::format("audit --queue c{}", q));
    EXPECT_EQ(audit.code, 0) << "c" << q << ": " << audit.out;
  }
  EXPECT_TRUE(cluster.broker().running());
  EXPECT_TRUE(cluster.worker(0).running());
  std::printf("Redis Cluster, 3 masters, %d queues, min_replicas 1: SIGKILL of a master: no job accepted for "
              "%lld ms (cluster-node-timeout 1000 ms); %zu accepted, %zu lost, %zu ran again\n",
              kQueues, static_cast<long long>(gap_ms), accepted.size(), lost, reruns);
}

}  // namespace
}  // namespace dueq::testing
