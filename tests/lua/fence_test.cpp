// Leadership and the epoch fence: lead.lua, and writes, queue creations and
// registrations of a deposed leader that change nothing.
// Run against a real redis-server through the broker's typed calls
// (docs/protocol.md's state diagram, rule by rule).
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;
using dueq::proto::StartCheck;

namespace {

std::vector<int64_t> lead_answer(RedisClient& redis, const std::string& instance, uint64_t epoch) {
  auto r = redis.call(calls::lead(instance, 2'000, epoch, "tcp://" + instance + ":7600"));
  EXPECT_TRUE(r);
  if (!r) return {};
  const redisReply* reply = r->get();
  EXPECT_EQ(reply->type, REDIS_REPLY_ARRAY) << reply_error(reply);
  if (reply->type != REDIS_REPLY_ARRAY) return {};
  return {reply->element[0]->integer, reply->element[1]->integer};
}

}  // namespace

// One broker leads; another asking is told who; a lapsed lease goes back to
// its holder when nobody led since, else to the next asker with the next
// epoch, and its old holder is told another leads.
TEST_F(Scripts, LeadGivesTheLeaseToOneBrokerAndANewEpochToEachNextLeader) {
  EXPECT_EQ(lead_answer(*store_, "a", 0), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(lead_answer(*store_, "b", 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(redis_->cli("GET dueq:{leader}:holder"), "1 a tcp://a:7600");
  EXPECT_EQ(lead_answer(*store_, "a", 1), (std::vector<int64_t>{1, 1}));  // renewed
  ASSERT_EQ(redis_->cli("DEL dueq:{leader}:holder"), "1");                // the lease lapses
  EXPECT_EQ(lead_answer(*store_, "a", 1), (std::vector<int64_t>{1, 1}));  // taken back: nobody led since
  ASSERT_EQ(redis_->cli("DEL dueq:{leader}:holder"), "1");
  EXPECT_EQ(lead_answer(*store_, "b", 0), (std::vector<int64_t>{2, 2}));  // taken by another
  EXPECT_EQ(lead_answer(*store_, "a", 1), (std::vector<int64_t>{0, 2}));
  // Resigning takes only one's own lease.
  EXPECT_EQ(calls::parse_resign(store_->call(calls::resign("a", 1))->get()), Resignation::not_held);
  EXPECT_EQ(calls::parse_resign(store_->call(calls::resign("b", 2))->get()), Resignation::removed);
  EXPECT_EQ(redis_->cli("EXISTS dueq:{leader}:holder"), "0");
  for (const auto& bad : std::vector<Command>{calls::lead("", 2'000, 0, ""), calls::lead("a b", 2'000, 0, ""),
                                              calls::lead("a", 99, 0, ""), calls::lead("a", 2'000, 0, "tcp://x y")}) {
    auto r = store_->call(bad);
    ASSERT_TRUE(r);
    EXPECT_NE(reply_error(r->get()).find("bad-args"), std::string_view::npos);
  }
  EXPECT_EQ(redis_->cli("EXISTS dueq:{leader}:holder"), "0");
}

// A deposed leader's call on a queue the new leader fenced writes nothing and
// fails the round; the new leader's calls go on.
TEST_F(Scripts, AWriteWithAnEpochOlderThanTheQueuesFailsAndWritesNothing) {
  enqueue({qjob("a", 0)}, 1000);
  EXPECT_EQ(redis_->cli("GET dueq:{q}:epoch"), "1");
  RedisClient next_leader(*parse_redis_url(redis_->url()));
  next_leader.set_epoch(2);
  ASSERT_TRUE(next_leader.connect());
  auto raised = next_leader.call(calls::fence_queue("q", 2));
  ASSERT_TRUE(raised);
  EXPECT_EQ(reply::num(raised->get()), 1);

  std::vector<proto::NewJob> late = {qjob("b", 0)};
  std::vector<const proto::NewJob*> ptrs = {&late[0]};
  auto refused = store_->call(calls::enqueue("q", ptrs, 1000, 3, 0));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::fenced);
  EXPECT_TRUE(store_->fenced());
  EXPECT_EQ(redis_->cli("HEXISTS dueq:{q}:jobs b"), "0");
  EXPECT_EQ(redis_->cli("GET dueq:{q}:epoch"), "2");

  auto accepted = next_leader.call(calls::enqueue("q", ptrs, 1000, 3, 0));
  ASSERT_TRUE(accepted);
  EXPECT_EQ(reply_error(accepted->get()), "");
  EXPECT_EQ(redis_->cli("HEXISTS dueq:{q}:jobs b"), "1");
  // An older leader cannot lower the epoch back either.
  auto lowered = next_leader.call(calls::fence_queue("q", 1));
  EXPECT_FALSE(lowered);
  EXPECT_EQ(redis_->cli("GET dueq:{q}:epoch"), "2");
}

// A deposed leader's call that arrives late, after a newer leader read the
// queue list, creates no queue: outside a Cluster every fenced call also
// compares its epoch with the newest one given.
TEST_F(Scripts, ALateCallOfADeposedLeaderCreatesNoQueue) {
  ASSERT_EQ(redis_->cli("SET dueq:{leader}:epochs 2"), "OK");  // a newer leader took over
  std::vector<proto::NewJob> late = {qjob("b", 0)};
  late[0].queue = "created-late";
  std::vector<const proto::NewJob*> ptrs = {&late[0]};
  auto refused = store_->call(calls::enqueue("created-late", ptrs, 1000, 3, 0));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::fenced);
  EXPECT_EQ(redis_->cli("KEYS 'dueq:{created-late}:*'"), "") << "nothing of the queue was written";

  RedisClient next_leader(*parse_redis_url(redis_->url()));
  next_leader.set_epoch(2);
  ASSERT_TRUE(next_leader.connect());
  auto accepted = next_leader.call(calls::enqueue("created-late", ptrs, 1000, 3, 0));
  ASSERT_TRUE(accepted);
  EXPECT_EQ(reply_error(accepted->get()), "");
  EXPECT_EQ(redis_->cli("HEXISTS dueq:{created-late}:jobs b"), "1");
}

// A new queue's name goes into the known queues by a fenced script: a
// late registration by a deposed leader adds nothing, and the script takes
// only the queue set and the leader's counter with the queue's name.
TEST_F(Scripts, ALateRegistrationOfADeposedLeaderAddsNoQueue) {
  ASSERT_EQ(redis_->cli("SET dueq:{leader}:epochs 2"), "OK");  // a newer leader took over
  auto refused = store_->call(calls::register_queue("registered-late"));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::fenced);
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues registered-late"), "0");

  RedisClient next_leader(*parse_redis_url(redis_->url()));
  next_leader.set_epoch(2);
  ASSERT_TRUE(next_leader.connect());
  auto added = next_leader.call(calls::register_queue("registered-late"));
  ASSERT_TRUE(added);
  EXPECT_EQ((*added)->integer, 1);
  auto again = next_leader.call(calls::register_queue("registered-late"));
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)->integer, 0);
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues registered-late"), "1");

  Command mismatched = script_call(lua::ScriptId::register_queue, {QueueKeys("one").jobs, kQueuesKey});
  mismatched.add("another");
  auto bad = next_leader.call(std::move(mismatched));
  ASSERT_TRUE(bad);
  EXPECT_NE(reply_error(bad->get()).find("bad-args"), std::string_view::npos);
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues another"), "0");
}

// Behind a Redis Cluster the fence reads no leader counter (it may be in
// another slot than a queue's keys); register_queue.lua, whose keys share
// the leader's slot, compares it itself. The call is built as the
// connection builds it behind a Cluster: the tag's epoch key and "<epoch>c".
TEST_F(Scripts, BehindAClusterALateRegistrationIsFencedByTheLeadersCounter) {
  ASSERT_EQ(redis_->cli("SET dueq:{leader}:epochs 2"), "OK");  // a newer leader took over
  auto as_in_cluster = [&](uint64_t epoch) {
    Command call = calls::register_queue("registered-late");
    call.append_fence({epoch_key_of(kQueuesKey)}, std::to_string(epoch) + "c");
    return call;
  };
  auto raw = RedisConnection::connect_to(*parse_redis_url(redis_->url()), 2000);  // scripts loaded by store_
  ASSERT_TRUE(raw);
  auto refused = raw->run(as_in_cluster(1));
  ASSERT_TRUE(refused);
  EXPECT_NE(reply_error(refused->get()).find("ERR dueq fenced"), std::string_view::npos) << reply_error(refused->get());
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues registered-late"), "0");
  auto added = raw->run(as_in_cluster(2));
  ASSERT_TRUE(added);
  EXPECT_EQ(reply_error(added->get()), "");
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues registered-late"), "1");
}

// Every script that writes a queue's keys checks the epoch. A script is
// fenced unless it is named here as one that only reads (or keeps the lease
// itself): a new script that forgets the fence fails this test.
TEST(Fence, EveryScriptButTheReadersAndTheLeaseKeepersIncludesTheFence) {
  const std::set<std::string> readers = {"audit", "audit_schedule", "group_show", "job_ends", "key_list", "scan_ids", "search", "show", "stats"};
  const std::set<std::string> lease_keepers = {"lead", "resign", "fence_queue"};
  for (const auto& script : lua::kScripts) {
    const bool exempt = readers.contains(script.name) || lease_keepers.contains(script.name);
    EXPECT_EQ(script.fenced, !exempt) << script.name;
  }
}
