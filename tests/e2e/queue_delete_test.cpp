// `dueq queue delete`: an empty queue goes, keys and name; anything else is
// refused and changes nothing; enqueues racing a delete are never lost.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <latch>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "broker/store/redis_connection.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

std::set<std::string> lines_of(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.insert(line);
  return out;
}

// A delete and `job`'s enqueue sent at nearly the same moment (the enqueue
// `skew` later, from another thread); whether the delete landed.
bool delete_beside_enqueue(Client& admin, Client& producer, const JobSpec& job, std::chrono::microseconds skew) {
  bool deleted = false;
  std::latch start(2);
  std::thread deleter([&] {
    start.arrive_and_wait();
    deleted = admin.admin(AdminCommand{"queue_delete", job.queue, {}, 0, 0}).has_value();
  });
  start.arrive_and_wait();
  std::this_thread::sleep_for(skew);
  auto accepted = producer.enqueue(job);
  deleter.join();
  EXPECT_TRUE(accepted) << job.id << ": " << (accepted ? "" : accepted.error().message);
  return deleted;
}

// Whether the registry a take-over reads names `queue`.
bool registered(broker::RedisConnection& redis, const std::string& queue) {
  auto reply = redis.run(broker::Command{"SISMEMBER", "dueq:{leader}:queues"}.add(queue));
  return reply && (*reply)->type == REDIS_REPLY_INTEGER && (*reply)->integer == 1;
}

}  // namespace

TEST(QueueDelete, AnEmptyQueueGoesAndAnyOtherIsRefusedWithItsCounts) {
  Cluster cluster;
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"busy", "t", "", "later", Client::in_ms(3'600'000), 3}));
  ASSERT_TRUE(client.enqueue({"typo", "t", "", "one", Client::in_ms(3'600'000), 3}));
  ASSERT_EQ(run_dueq(cluster.endpoint(), "cancel one").code, 0);  // typo now holds only a cancelled id

  const std::string keys_before = cluster.redis().cli("KEYS 'dueq:{busy}:*'");
  const auto refused = run_dueq(cluster.endpoint(), "queue delete busy", true);
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_NE(refused.out.find("not empty: 1 scheduled, 0 ready, 0 running, 0 dead"), std::string::npos) << refused.out;
  EXPECT_EQ(cluster.redis().cli("KEYS 'dueq:{busy}:*'"), keys_before) << "nothing changed";
  EXPECT_EQ(cluster.redis().cli("SISMEMBER dueq:{leader}:queues busy"), "1");

  const auto deleted = run_dueq(cluster.endpoint(), "queue delete typo", true);
  EXPECT_EQ(deleted.code, 0) << deleted.out;
  EXPECT_NE(deleted.out.find("queue typo deleted"), std::string::npos) << deleted.out;
  EXPECT_EQ(cluster.redis().cli("SISMEMBER dueq:{leader}:queues typo"), "0");
  EXPECT_EQ(cluster.redis().cli("KEYS 'dueq:{typo}:*'"), "dueq:{typo}:epoch") << "only the fence stays";
  auto stats = client.stats();
  ASSERT_TRUE(stats);
  for (const auto& q : *stats) EXPECT_NE(q.queue, "typo");
  EXPECT_EQ(run_dueq(cluster.endpoint(), "queue delete typo", true).code, 3) << "gone: not found";
  EXPECT_EQ(run_dueq(cluster.endpoint(), "queue delete never-was", true).code, 3);
  EXPECT_EQ(run_dueq(cluster.endpoint(), "queue delete 'bad name'", true).code, 2);

  // A periodic entry would fill it again: refused until it is removed.
  ASSERT_EQ(run_dueq(cluster.endpoint(), "cron add tick --schedule '0 0 3 * * *' --queue nightly --type t").code, 0);
  ASSERT_TRUE(eventually([&] { return cluster.redis().cli("SISMEMBER dueq:{leader}:queues nightly") == "1"; }, 10s));
  const auto cron = run_dueq(cluster.endpoint(), "queue delete nightly", true);
  EXPECT_EQ(cron.code, 2) << cron.out;
  EXPECT_NE(cron.out.find("periodic entry 'tick'"), std::string::npos) << cron.out;

  // Used again, it is a queue again: registered, so a take-over finds it.
  ASSERT_TRUE(client.enqueue({"typo", "t", "", "again", Client::in_ms(3'600'000), 3}));
  EXPECT_EQ(cluster.redis().cli("SISMEMBER dueq:{leader}:queues typo"), "1");
  EXPECT_TRUE(cluster.broker().running());
}

// A delete and an enqueue into the empty queue sent at nearly the same
// moment, 300 times: whichever Redis runs first, an accepted job's queue is
// registered afterwards (else a broker that takes over never learns of it).
TEST(QueueDelete, AJobEnqueuedBesideADeleteLeavesItsQueueRegistered) {
  Cluster cluster;
  Client producer(cluster.endpoint());
  Client admin(cluster.endpoint());
  ASSERT_TRUE(producer.enqueue({"racy", "t", "", "first", Client::in_ms(3'600'000), 3}));
  ASSERT_EQ(run_dueq(cluster.endpoint(), "cancel first").code, 0);
  auto redis = broker::RedisConnection::connect(*parse_redis_url(cluster.redis().url()), 5000);
  ASSERT_TRUE(redis) << redis.error().message;
  std::mt19937 rng(7);
  int deleted = 0, unregistered = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string id = fmt::format("job-{}", i);
    if (delete_beside_enqueue(admin, producer, {"racy", "t", "", id, Client::in_ms(3'600'000), 3},
                              std::chrono::microseconds(rng() % 400)))
      ++deleted;
    ASSERT_FALSE(::testing::Test::HasFailure());
    if (!registered(*redis, "racy")) ++unregistered;
    // Empty again (a cancelled id is no job) for the next round; through the
    // client, not `dueq cancel`: 300 sanitized CLI starts took a minute.
    ASSERT_TRUE(admin.admin(AdminCommand{"cancel", "racy", {id}, 0, 0}));
  }
  std::printf("[ race     ] 300 enqueues beside a delete: %d deletes landed\n", deleted);
  EXPECT_GT(deleted, 0);
  EXPECT_EQ(unregistered, 0) << "jobs were left in a queue the registry does not name";
}

// Deletes sent again and again while a producer enqueues into the queue and
// a worker runs its jobs: a delete lands only when the queue is empty, and
// every job accepted after it registers the queue again. A broker started
// afresh (it learns the queues from the registry) runs whatever is left:
// every accepted job runs.
TEST(QueueDelete, EnqueuesRacingDeletesAreNeverLost) {
  Cluster cluster;
  const auto runs = cluster.dir() / "runs.txt";
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "racy", "--exec",
                        "t=echo $DUEQ_JOB_ID >> " + runs.string()});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  std::atomic<bool> stop{false};
  std::set<std::string> accepted;
  std::thread producer([&] {
    Client c(cluster.endpoint());
    for (int i = 0; !stop; ++i) {
      const std::string id = fmt::format("j-{}", i);
      // Bursts of five, one of them due a little later, and a pause in
      // which the worker may empty the queue; now and then a longer one, in
      // which even a slow worker (a loaded machine) does.
      if (c.enqueue({"racy", "t", "", id, i % 5 == 0 ? Client::in_ms(20) : 0, 3})) accepted.insert(id);
      std::this_thread::sleep_for(std::chrono::milliseconds(i % 50 == 49 ? 500 : i % 5 == 4 ? 40 : 1));
    }
  });
  int deletes = 0;
  // A delete every 10 ms through the client (the first test runs `dueq queue
  // delete` itself), 150 of them and on until three landed (at most 30 s):
  // the producer's pauses, in which the worker may empty the queue, come
  // every 50 jobs.
  Client admin(cluster.endpoint());
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  for (int i = 0; (i < 150 || deletes < 3) && std::chrono::steady_clock::now() < give_up; ++i) {
    if (admin.admin(AdminCommand{"queue_delete", "racy", {}, 0, 0})) ++deletes;
    std::this_thread::sleep_for(10ms);
  }
  stop = true;
  producer.join();
  std::printf("[ race     ] %zu jobs accepted, %d deletes landed\n", accepted.size(), deletes);
  EXPECT_GT(deletes, 0) << "the race was run: some deletes found the queue empty";
  // A broker that knows only what Redis holds.
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait(10s);
  cluster.start_broker();
  ASSERT_TRUE(eventually([&] { return lines_of(read_file(runs)).size() >= accepted.size(); }, 30s))
      << lines_of(read_file(runs)).size() << " of " << accepted.size() << " ran";
  const auto ran = lines_of(read_file(runs));
  for (const auto& id : accepted) EXPECT_TRUE(ran.contains(id)) << id << " was accepted and never ran";
}

// A job due a moment later, enqueued beside a delete, is promoted and runs
// when due: whatever the delete's answer, the loop keeps the due time the
// enqueue told it (a queue's hints are never reset by a delete).
TEST(QueueDelete, ADelayedJobEnqueuedBesideADeleteRunsWhenDue) {
  Cluster cluster;
  const auto runs = cluster.dir() / "runs.txt";
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "racy", "--exec",
                        "t=echo $DUEQ_JOB_ID >> " + runs.string()});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client producer(cluster.endpoint());
  Client admin(cluster.endpoint());
  std::mt19937 rng(11);
  int deleted = 0;
  for (int i = 0; i < 60; ++i) {
    const std::string id = fmt::format("soon-{}", i);
    if (delete_beside_enqueue(admin, producer, {"racy", "t", "", id, Client::in_ms(30), 3}, std::chrono::microseconds(rng() % 400)))
      ++deleted;
    ASSERT_FALSE(::testing::Test::HasFailure());
    ASSERT_TRUE(eventually([&] { return lines_of(read_file(runs)).contains(id); }, 10s)) << id << " never ran";
  }
  std::printf("[ race     ] 60 delayed enqueues beside a delete: %d deletes landed\n", deleted);
  EXPECT_GT(deleted, 0);
}

// The store comes back as it was before a delete (a fail-over to a replica
// that had not seen the cancel and the delete, a Redis restarted from an
// older file): the broker, which had let the deleted queue go, reads the
// registry again after it reconnects and runs the job the queue holds
// there. Before, it skipped that queue until a write named it again.
TEST(QueueDelete, AQueueTheStoreHoldsAgainAfterAReconnectRunsItsJobs) {
  Cluster cluster;
  const auto runs = cluster.dir() / "runs.txt";
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "back", "--exec",
                        "t=echo $DUEQ_JOB_ID >> " + runs.string()});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"back", "t", "", "kept", Client::in_ms(6'000), 3}));
  const auto keys = lines_of(cluster.redis().cli("KEYS 'dueq:{back}:*'"));
  ASSERT_FALSE(keys.empty());
  for (const auto& key : keys) ASSERT_EQ(cluster.redis().cli(fmt::format("COPY {0} saved:{0}", key)), "1") << key;

  ASSERT_EQ(run_dueq(cluster.endpoint(), "cancel --queue back kept").code, 0);
  const auto deleted = run_dueq(cluster.endpoint(), "queue delete back", true);
  ASSERT_EQ(deleted.code, 0) << deleted.out;
  ASSERT_EQ(cluster.redis().cli("SISMEMBER dueq:{leader}:queues back"), "0");

  for (const auto& key : keys) ASSERT_EQ(cluster.redis().cli(fmt::format("COPY saved:{0} {0} REPLACE", key)), "1") << key;
  ASSERT_EQ(cluster.redis().cli("SADD dueq:{leader}:queues back"), "1");
  const auto job = [&] { return run_dueq(cluster.endpoint(), "job kept --queue back --json", true).out; };
  ASSERT_NE(job().find("\"scheduled\""), std::string::npos) << job();
  cluster.redis().cli("CLIENT KILL TYPE normal");  // the broker reconnects

  ASSERT_TRUE(eventually([&] { return lines_of(read_file(runs)).contains("kept"); }, 30s))
      << "the job of a queue the store registers again never ran: " << job();
  EXPECT_TRUE(cluster.broker().running());
}
