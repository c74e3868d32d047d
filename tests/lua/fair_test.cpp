// Fair dispatch between keys (lua/lib/fair.lua): tags given by enqueue and
// promote, the virtual time raised by lease, weights, and the state a fair
// queue keeps. Run against a real redis-server through the broker's typed
// calls.
#include "broker/admin/key_commands.hpp"
#include "broker/loop/stats_requests.hpp"
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;

namespace {

proto::NewJob fair_keyed(std::string id, std::string key, int64_t due = 0) {
  return proto::NewJob{"q", std::move(id), "t", proto::Bytes{"p"}, due, 0, 0, 0, proto::Bytes{std::move(key)}};
}

LeaseLimits fair_limits(int64_t now) { return {.now_ms = now, .fair = true}; }

std::string padded(int i) { return fmt::format("{:05}", i); }

}  // namespace

class Fair : public Scripts {
 protected:
  void enqueue_fair(const std::vector<proto::NewJob>& jobs, int64_t now, bool fair = true) {
    for (size_t i = 0; i < jobs.size(); i += 500) {
      std::vector<const proto::NewJob*> ptrs;
      for (size_t j = i; j < std::min(jobs.size(), i + 500); ++j) ptrs.push_back(&jobs[j]);
      Round round;
      round.add(calls::enqueue("q", ptrs, now, 3, 0, 0, "", true, fair));
      const redisReply* r = run(round);
      ASSERT_TRUE(ints(r)) << reply_error(r);
    }
  }
  void promote_fair(int64_t now, int limit = 5000) {
    Round round;
    round.add(calls::promote("q", now, limit, true));
    const redisReply* r = run(round);
    ASSERT_TRUE(calls::parse_promote(r)) << reply_error(r);
  }
  std::vector<LeasedJob> lease_with(int count, const LeaseLimits& limits) {
    Round round;
    round.add(calls::lease("q", 60'000, count, limits));
    auto batch = calls::parse_lease(run(round));
    EXPECT_TRUE(batch) << (batch ? "" : batch.error().message);
    return batch ? batch->jobs : std::vector<LeasedJob>{};
  }
  void weigh(const std::string& key, int64_t weight) {
    Round round;
    round.add(calls::key_limit("q", key, std::to_string(weight), KeySetting::weight));
    auto out = calls::parse_key_limit(run(round));
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_EQ(out->change, KeyLimitChange::set);
  }
  static std::map<std::string, int> per_key(const std::vector<LeasedJob>& jobs) {
    std::map<std::string, int> n;
    for (const auto& j : jobs) ++n[j.record.key.empty() ? "-" : j.record.key];
    return n;
  }
  std::string cli(const std::string& command) { return redis_->cli(command); }
};

TEST_F(Fair, ALightKeysJobGoesAheadOfAHeavyKeysBacklog) {
  std::vector<proto::NewJob> heavy;
  for (int i = 0; i < 1000; ++i) heavy.push_back(fair_keyed("h" + padded(i), "heavy", 100));
  enqueue_fair(heavy, 1000);
  enqueue_fair({fair_keyed("l1", "light-1", 500), fair_keyed("l2", "light-2", 500), job("solo", 500)}, 1000);
  auto first = lease_with(4, fair_limits(1000));
  std::set<std::string> ids;
  for (const auto& j : first) ids.insert(j.id);
  EXPECT_EQ(ids, (std::set<std::string>{"h00000", "l1", "l2", "solo"}))
      << "the heavy key's first job and one of each other flow: 1000 earlier jobs of one key hold nobody up";
}

TEST_F(Fair, WithoutFairnessTheSameLightJobsWaitBehindTheBacklog) {
  std::vector<proto::NewJob> heavy;
  for (int i = 0; i < 1000; ++i) heavy.push_back(fair_keyed("h" + padded(i), "heavy", 100));
  enqueue_fair(heavy, 1000, /*fair=*/false);
  enqueue_fair({fair_keyed("l1", "light-1", 500), fair_keyed("l2", "light-2", 500)}, 1000, false);
  auto first = lease_with(4, LeaseLimits{1000, 0, 0, 1, 0, false, false});
  EXPECT_EQ(per_key(first), (std::map<std::string, int>{{"heavy", 4}})) << "due order: the backlog goes first";
}

TEST_F(Fair, KeysWithJobsWaitingShareTheLeasesByWeight) {
  weigh("A", 3);
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 600; ++i)
    for (const char* key : {"A", "B", "C"}) jobs.push_back(fair_keyed(std::string(key) + padded(i), key, 100 + i));
  enqueue_fair(jobs, 1000);
  std::vector<LeasedJob> taken;
  for (int round = 0; round < 5; ++round)
    for (auto& j : lease_with(100, fair_limits(1000 + round))) taken.push_back(std::move(j));
  ASSERT_EQ(taken.size(), 500u);
  auto n = per_key(taken);
  // 3 : 1 : 1 of 500 is 300 : 100 : 100; tags are whole steps (1000 / 3
  // rounds to 333), so a few either way.
  EXPECT_NEAR(n["A"], 300, 3);
  EXPECT_NEAR(n["B"], 100, 3);
  EXPECT_NEAR(n["C"], 100, 3);
  // Within a key, its jobs keep their order.
  std::vector<std::string> a;
  for (const auto& j : taken)
    if (j.record.key == "A") a.push_back(j.id);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
}

TEST_F(Fair, PromotedJobsTakeTheirTagsInDueOrderAcrossPartitions) {
  // Ids spread over many schedule partitions; due times in reverse id order.
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 200; ++i) jobs.push_back(fair_keyed("a" + padded(i), "A", 10'000 - i));
  enqueue_fair(jobs, 1000);
  promote_fair(20'000);
  std::vector<std::string> order;
  for (int round = 0; round < 4; ++round)
    for (const auto& j : lease_with(50, fair_limits(20'000))) order.push_back(j.id);
  ASSERT_EQ(order.size(), 200u);
  EXPECT_TRUE(std::is_sorted(order.rbegin(), order.rend())) << "the earliest due first: a199 ... a000";
}

TEST_F(Fair, AHeavyBacklogPromotedFirstDoesNotHoldUpALightKeyPromotedLater) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 2000; ++i) jobs.push_back(fair_keyed("h" + padded(i), "heavy", 5000));
  jobs.push_back(fair_keyed("light", "light", 6000));
  enqueue_fair(jobs, 1000);
  promote_fair(5500);
  ASSERT_EQ(lease_with(10, fair_limits(5500)).size(), 10u);
  promote_fair(6500);
  auto next = lease_with(2, fair_limits(6500));
  ASSERT_EQ(next.size(), 2u);
  EXPECT_TRUE(next[0].id == "light" || next[1].id == "light") << "1990 heavy jobs were still in line";
}

TEST_F(Fair, AFairQueuesKeyLimitParksTheKeysOtherJobsAndItsAckLetsTheNextRun) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 10; ++i) jobs.push_back(fair_keyed("h" + padded(i), "heavy", 100));
  jobs.push_back(fair_keyed("light", "light", 100));
  enqueue_fair(jobs, 1000);
  LeaseLimits limits = fair_limits(1000);
  limits.per_key = 1;
  auto first = lease_with(20, limits);
  std::set<std::string> ids;
  for (const auto& j : first) ids.insert(j.id);
  EXPECT_EQ(ids, (std::set<std::string>{"h00000", "light"})) << "one of each key: the limit holds in a fair queue";
  EXPECT_EQ(cli("ZCARD 'dueq:{q}:keys:parked'"), "9");
  const auto& h0 = first[0].id == "h00000" ? first[0] : first[1];
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{h0.id, h0.token}}));
  ASSERT_EQ(*ints(run(ack)), (std::vector<int64_t>{1, -1}));
  auto next = lease_with(20, limits);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].id, "h00001") << "the key's next job, in its order";
}

TEST_F(Fair, IdleKeysCostNothingAndAQueueNoLongerFairDropsItsState) {
  enqueue_fair({fair_keyed("a1", "A", 100), fair_keyed("a2", "A", 100), fair_keyed("b1", "B", 100)}, 1000);
  EXPECT_EQ(cli("ZCARD 'dueq:{q}:fair:finish'"), "2") << "A and B have jobs in line";
  EXPECT_EQ(cli("GET 'dueq:{q}:fair'"), "1000") << "the virtual time started at the first enqueue";
  Round stats;
  stats.add(calls::stats("q"));
  auto counts = calls::parse_stats("q", run(stats));
  ASSERT_TRUE(counts);
  EXPECT_EQ(counts->oldest_ready_due_ms, 100) << "the first job's due time, read from its record, not its tag";
  EXPECT_EQ(lease_with(10, fair_limits(1000)).size(), 3u);
  EXPECT_EQ(cli("EXISTS 'dueq:{q}:fair:finish'"), "0") << "nothing in line: no key keeps a finish tag";
  EXPECT_EQ(cli("GET 'dueq:{q}:fair'"), "2000") << "raised to a2's tag, the highest leased";
  enqueue_fair({fair_keyed("c1", "C", 100)}, 3000);
  lease_with(10, LeaseLimits{3000, 0, 0, 1, 0, false, false});
  EXPECT_EQ(cli("EXISTS 'dueq:{q}:fair'"), "0") << "a lease of a queue no longer fair removed the virtual time";
}

TEST_F(Fair, WeightsAreBoundedAndBadArgumentsWriteNothing) {
  Round round;
  round.add(calls::key_limit("q", "A", "1001", KeySetting::weight));
  round.add(calls::key_limit("q", "A", "clear", KeySetting::weight));
  auto replies = store_->pipeline(round.take_commands());
  ASSERT_TRUE(replies);
  EXPECT_NE(reply_error((*replies)[0].get()).find("bad-args key_limit"), std::string::npos);
  EXPECT_TRUE(calls::parse_key_limit((*replies)[1].get())) << "clear with nothing to clear";
  EXPECT_EQ(cli("EXISTS 'dueq:{q}:keys:weights'"), "0");
  // A fair flag other than 0 or 1, sent by hand.
  const std::string script = lua::script(lua::ScriptId::promote).source;
  auto r = store_->call(Command{"EVAL", script, "8", "dueq:{q}:schedule", "dueq:{q}:ready", "dueq:{q}:jobs",
                                "dueq:{q}:stats", "dueq:{q}:fair", "dueq:{q}:keys:weights", QueueKeys("q").epoch,
                                kLeaderEpochsKey, "1000", "10", "yes", "1"});
  ASSERT_TRUE(r);
  EXPECT_NE(reply_error(r->get()).find("bad-args promote"), std::string::npos);
  EXPECT_EQ(cli("EXISTS 'dueq:{q}:fair'"), "0");
}
