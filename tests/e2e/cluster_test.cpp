// Redis Cluster: queues spread over the masters by their hash tag; the
// broker follows a master's fail-over to its replica and a queue's slot
// moving to another master.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "broker/store/cluster_slots.hpp"
#include "common/clock.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/redis_cluster.hpp"
#include "tests/support/steady_producer.hpp"

namespace dueq::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kQueues = 12;  // 4, 5 and 3 of them on the three masters

// A broker on `redis`, one example worker serving the queues c0..c11.
void start_on(Cluster& cluster, RedisCluster& redis, const std::vector<std::string>& broker_args) {
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait();
  cluster.use_redis_url(redis.url());
  cluster.start_broker(broker_args);
  std::vector<std::string> worker = {bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--concurrency", "16",
                                     "--record", (cluster.dir() / "starts.txt").string()};
  for (int q = 0; q < kQueues; ++q) worker.insert(worker.end(), {"--queue", fmt::format("c{}", q)});
  cluster.start_worker(worker);
  ASSERT_TRUE(cluster.wait_for_workers(1));
}

// One producer of single jobs over the queues c0..c11, each job due now or
// in 300 ms.
class Flow : public SteadyProducer {
 public:
  explicit Flow(const std::string& endpoint)
      : SteadyProducer(endpoint, [](int n) {
          return JobSpec{fmt::format("c{}", n % kQueues), "noop", "", fmt::format("c-{}", n),
                         wall_ms() + (n % 2 == 0 ? 0 : 300), 0};
        }, 3ms) {}

  // Once stopped: waits for every accepted job to run; checks that none
  // started early and every queue's audit is clean. Returns {lost, ran again}.
  std::pair<size_t, size_t> check(Cluster& cluster) {
    const auto record = cluster.dir() / "starts.txt";
    eventually([&] { return all_started(read_records(record)); }, 30s);
    const Tally tally = this->tally(read_records(record));
    // One audit of every queue: a `dueq audit --queue` each took seconds.
    auto audit = run_dueq(cluster.endpoint(), "audit");
    EXPECT_EQ(audit.code, 0) << audit.out;
    EXPECT_EQ(count_of(audit.out, "queue c"), static_cast<size_t>(kQueues)) << audit.out;
    return {tally.lost, tally.reruns};
  }
};

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
  start_on(cluster, redis, {"--config", config.string()});
  Flow flow(cluster.endpoint());
  EXPECT_TRUE(eventually([&] { return flow.accepted() >= 150; }, 20s));
  size_t masters_with_keys = 0;
  for (size_t i = 0; i < redis.size(); ++i)
    if (redis.node(i).cli("ROLE").starts_with("master") && redis.node(i).cli("DBSIZE") != "0") ++masters_with_keys;
  EXPECT_EQ(masters_with_keys, 3u) << "the queues' keys are to be spread over every master";

  RedisServer& victim = redis.master_of("dueq:{c0}:jobs");
  const int64_t killed_at = steady_ms();
  victim.kill(SIGKILL);
  const size_t at_kill = flow.accepted();
  EXPECT_TRUE(eventually([&] { return flow.accepted() >= at_kill + 150; }, 30s)) << "the flow did not resume";
  flow.stop();
  const auto [lost, reruns] = flow.check(cluster);
  EXPECT_EQ(lost, 0u);
  EXPECT_TRUE(cluster.broker().running());
  EXPECT_TRUE(cluster.worker(0).running());
  std::printf("Redis Cluster, 3 masters, %d queues, min_replicas 1: SIGKILL of a master: no job accepted for "
              "%lld ms (cluster-node-timeout 1000 ms); %zu accepted, %zu lost, %zu ran again\n",
              kQueues, static_cast<long long>(flow.longest_gap_after(killed_at)), flow.accepted(), lost, reruns);
}

// Rule: a queue's slot moved to another master while its jobs flow (keys
// migrated ten at a time) is written to nowhere while it is half moved
// (its scripts are refused, none runs half), and every accepted job runs,
// none early, with every audit clean, once it has moved.
TEST(RedisCluster, MovingTheSlotOfABusyQueueLosesNothingAndItsJobsGoOnFromTheNewMaster) {
  RedisCluster redis(3, 0);
  Cluster cluster;
  start_on(cluster, redis, {});
  Flow flow(cluster.endpoint());
  EXPECT_TRUE(eventually([&] { return flow.accepted() >= 150; }, 20s));
  // Queue c0 gets 3,000 jobs due over the next 1.5 to 4.5 s: its schedule
  // spreads over some 2,000 partitions (thousands of keys to move), and
  // they come due while the slot moves.
  std::map<std::string, int64_t> bulk;
  {
    Client producer(cluster.endpoint());
    std::vector<JobSpec> jobs;
    const int64_t now = wall_ms();
    for (int i = 0; i < 3'000; ++i) {
      jobs.push_back(JobSpec{"c0", "noop", "", fmt::format("bulk-{}", i), now + 1'500 + i, 0});
      bulk[jobs.back().id] = jobs.back().due_ms;
    }
    for (size_t i = 0; i < jobs.size(); i += 1'000) {
      auto done = producer.enqueue_batch(std::vector<JobSpec>(jobs.begin() + static_cast<std::ptrdiff_t>(i),
                                                              jobs.begin() + static_cast<std::ptrdiff_t>(i + 1'000)));
      ASSERT_TRUE(done);
      for (const auto& r : *done) ASSERT_EQ(r.status, EnqueueResult::Status::accepted);
    }
  }
  const int slot = static_cast<int>(broker::key_slot("dueq:{c0}:jobs"));
  RedisServer& from = redis.master_of("dueq:{c0}:jobs");
  RedisServer* to = nullptr;
  for (size_t i = 0; i < redis.size() && to == nullptr; ++i)
    if (&redis.node(i) != &from) to = &redis.node(i);
  const std::string keys_before = from.cli(fmt::format("CLUSTER COUNTKEYSINSLOT {}", slot));
  const int64_t moved_at = steady_ms();
  redis.move_slot(slot, *to);
  const int64_t move_ms = steady_ms() - moved_at;
  EXPECT_EQ(&redis.master_of("dueq:{c0}:jobs"), to);
  EXPECT_EQ(from.cli(fmt::format("CLUSTER COUNTKEYSINSLOT {}", slot)), "0");
  const size_t at_move = flow.accepted();
  EXPECT_TRUE(eventually([&] { return flow.accepted() >= at_move + 150; }, 30s)) << "the flow did not resume";
  flow.stop();
  const auto [lost, reruns] = flow.check(cluster);
  EXPECT_EQ(lost, 0u);
  EXPECT_NE(to->cli("EXISTS dueq:{c0}:jobs"), "0") << "queue c0 lives on its new master";
  std::map<std::string, int> bulk_runs;
  for (const auto& r : read_records(cluster.dir() / "starts.txt")) {
    auto it = bulk.find(r.id);
    if (it == bulk.end()) continue;
    ++bulk_runs[r.id];
    EXPECT_GE(r.start_us, it->second * 1000) << r.id << " started early";
  }
  EXPECT_EQ(bulk_runs.size(), bulk.size()) << "every job of the busy queue ran";
  // The slot was met half moved: some calls were refused and tried again.
  EXPECT_GE(cluster.log_count("its Redis Cluster slot is moving"), 1u);
  std::printf("Redis Cluster, 3 masters, %d queues: slot %d of queue c0 (%s keys) moved in %lld ms while jobs flowed; "
              "no job accepted for %lld ms at most; %zu + %zu accepted, %zu lost, %zu ran again\n",
              kQueues, slot, keys_before.c_str(), static_cast<long long>(move_ms),
              static_cast<long long>(flow.longest_gap_after(moved_at)), flow.accepted(), bulk.size(), lost, reruns);
}

// Rule: behind a Redis Cluster a new queue's registration (in the leader's
// slot, fenced by the leader's epoch counter) is confirmed before its first
// write (in the queue's slot, where a new queue has no epoch to fence it).
// A newer epoch given (as when a standby took over while this leader's
// bytes were held) refuses the registration, and nothing of the queue is
// written anywhere; before, the registration was a plain SADD and the
// enqueue landed in a queue no leader knew.
TEST(RedisCluster, ANewQueueOfADeposedLeaderIsNeitherRegisteredNorWritten) {
  RedisCluster redis(3, 0);
  Cluster cluster;
  start_on(cluster, redis, {});
  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 3000, .attempts = 1});
  // A new queue, registered first and then written, while this broker leads.
  auto first = client.enqueue(JobSpec{"first-new", "noop", "", "f-1", 0, 0});
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->status, EnqueueResult::Status::accepted) << first->reason;
  RedisServer& leader_slot = redis.master_of("dueq:{leader}:epochs");
  EXPECT_EQ(leader_slot.cli("SISMEMBER dueq:{leader}:queues first-new"), "1");

  const int64_t epoch = std::stoll(leader_slot.cli("GET dueq:{leader}:epochs"));
  ASSERT_EQ(leader_slot.cli(fmt::format("SET dueq:{{leader}}:epochs {}", epoch + 1)), "OK");  // a newer leader
  auto late = client.enqueue(JobSpec{"made-late", "noop", "", "late-1", 0, 0});
  EXPECT_FALSE(late && late->status == EnqueueResult::Status::accepted) << "a deposed leader accepted a job";
  EXPECT_EQ(leader_slot.cli("SISMEMBER dueq:{leader}:queues made-late"), "0");
  EXPECT_EQ(redis.master_of("dueq:{made-late}:jobs").cli("KEYS 'dueq:{made-late}:*'"), "")
      << "nothing of the queue is written";
}

}  // namespace
}  // namespace dueq::testing
