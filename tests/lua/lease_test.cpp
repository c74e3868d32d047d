// lease.lua: tokens, attempts, pauses and the queue's limits; align_leases.lua.
// Run against a real redis-server through the broker's typed calls
// (docs/protocol.md's state diagram, rule by rule).
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;
using dueq::proto::StartCheck;

TEST_F(Scripts, LeaseStampsANewTokenAndAttemptEachTime) {
  enqueue({job("a")}, 1000);
  auto first = lease(10, 5000);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].id, "a");
  EXPECT_NE(first[0].token, 0u);
  EXPECT_EQ(first[0].attempt, 1u);
  EXPECT_EQ(first[0].record.payload, "payload-x");
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "5000");
  // A worker starts it and its lease runs out; reclaim puts it back; the
  // next lease has a new token and the next attempt number.
  record_start(first, 5000);
  Round reclaim;
  reclaim.add(calls::reclaim("q", 6000, 100, 60));
  EXPECT_EQ(calls::parse_reclaim(run(reclaim))->requeued, 1);
  auto second = lease(10, 9000);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(second[0].token, first[0].token);
  EXPECT_EQ(second[0].attempt, 2u);
}

// Tokens are drawn at random, not counted in Redis: when Redis comes back
// from an AOF older than a lease it had acknowledged, the next delivery
// gets a token of its own, and a late ack of the first one changes nothing.
TEST_F(Scripts, ATokenIsNotRepeatedAfterRedisLostAcknowledgedWrites) {
  enqueue({job("a")}, 1000);
  // The AOF as it is now, on disk (appendfsync everysec: wait for a sync).
  ASSERT_EQ(redis_->cli("CONFIG SET appendfsync always"), "OK");
  redis_->cli("SET sync-marker 1");
  const auto saved = redis_->dir() / "saved-aof";
  std::filesystem::copy(redis_->dir() / "appendonlydir", saved, std::filesystem::copy_options::recursive);
  auto first = lease(10, 5000);
  ASSERT_EQ(first.size(), 1u);
  // Redis crashes and restarts from the older AOF: the lease is lost.
  redis_->kill(SIGKILL);
  std::filesystem::remove_all(redis_->dir() / "appendonlydir");
  std::filesystem::rename(saved, redis_->dir() / "appendonlydir");
  redis_->start();
  store_->disconnect();
  ASSERT_TRUE(store_->connect());
  ASSERT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1") << "the lease was not rolled back";
  auto second = lease(10, 9000);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(second[0].token, first[0].token);
  Round late;
  late.add(calls::ack("q", 2000, 60, {{"a", first[0].token}}));
  EXPECT_EQ(*ints(run(late)), (std::vector<int64_t>{0, -1})) << "a late ack of the first delivery completed the second";
  Round current;
  current.add(calls::ack("q", 2000, 60, {{"a", second[0].token}}));
  EXPECT_EQ(*ints(run(current)), (std::vector<int64_t>{1, -1}));
}

TEST_F(Scripts, LeaseRefusesMissingOrMalformedTokens) {
  enqueue({job("a")}, 1000);
  const auto args = calls::lease("q", 5000, 2).args();
  auto eval = [&](const std::vector<std::string>& tokens) {
    Command call;
    call.mark_fenced();  // rebuilt from a script_call's arguments
    std::string blob;
    for (const auto& t : tokens) blob += t;
    // EVALSHA, sha, the number of keys, the keys, deadline, count, then
    // these tokens.
    const size_t tokens_at = 3 + std::stoul(args[2]) + 2;
    for (size_t i = 0; i < args.size(); ++i) call.add(i == tokens_at ? blob : args[i]);
    Round round;
    round.add(std::move(call));
    return std::string(reply_error(run(round)));
  };
  const std::string seven = "0000000000000007";
  EXPECT_NE(eval({seven}).find("bad-args"), std::string::npos) << "one token for a count of 2";
  // The first token goes to the one job there is.
  EXPECT_NE(eval({"0000000000000000", seven}).find("bad-args"), std::string::npos);
  EXPECT_NE(eval({"-000000000000003", seven}).find("bad-args"), std::string::npos);
  EXPECT_NE(eval({"000000000000012x", seven}).find("bad-args"), std::string::npos);
  EXPECT_NE(eval({"00000000000000007", "000000000000007"}).find("bad-args"), std::string::npos) << "tokens are cut every 16 digits, not at their own ends";
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1") << "a refused lease took the job";
  EXPECT_EQ(eval({"ffffffffffffffff", seven}), "");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:tokens' a"), "ffffffffffffffff");
}

TEST_F(Scripts, LeaseTakesAtMostCountAndSkipsVanishedJobs) {
  enqueue({job("a"), job("b"), job("c")}, 1000);
  redis_->cli("HDEL 'dueq:{q}:jobs' a");
  auto leased = lease(2, 5000);
  ASSERT_EQ(leased.size(), 1u);  // a vanished, b leased; c still ready
  EXPECT_EQ(leased[0].id, "b");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1");
}

// A paused queue leases nothing, by lease.lua or at once by enqueue.lua,
// and keeps accepting jobs; after resume it leases them in order.
TEST_F(Scripts, APausedQueueAcceptsJobsAndLeasesNoneUntilResumed) {
  Round pause;
  pause.add(calls::pause("q", true, 500));
  auto paused = calls::parse_pause(run(pause));
  ASSERT_TRUE(paused);
  EXPECT_EQ(paused->change, PauseChange::changed);
  EXPECT_EQ(paused->paused_since_ms, 500);
  pause.add(calls::pause("q", true, 600));
  auto again = calls::parse_pause(run(pause));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->change, PauseChange::already_so);
  EXPECT_EQ(again->paused_since_ms, 500) << "pausing twice keeps the first time";
  enqueue({job("a"), job("b")}, 1000);
  std::vector<proto::NewJob> jobs = {job("c")};
  std::vector<const proto::NewJob*> ptrs = {&jobs[0]};
  Round at_once;
  at_once.add(calls::enqueue("q", ptrs, 1000, 3, 0, 9000, "00000000000000cc"));
  EXPECT_EQ(*ints(run(at_once)), (std::vector<int64_t>{1})) << "accepted into ready, not leased";
  Round round;
  round.add(calls::lease("q", 5000, 10));
  auto batch = calls::parse_lease(run(round));
  ASSERT_TRUE(batch);
  EXPECT_TRUE(batch->jobs.empty());
  EXPECT_EQ(batch->held_by, LeaseHold::paused);
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "3");
  Round resume;
  resume.add(calls::pause("q", false, 700));
  auto resumed = calls::parse_pause(run(resume));
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->change, PauseChange::changed);
  EXPECT_EQ(resumed->paused_since_ms, 0);
  auto leased = lease(10, 5000);
  ASSERT_EQ(leased.size(), 3u);
  EXPECT_EQ(leased[0].id, "a");
}

// A concurrency limit counts every lease of the queue in Redis, whoever
// leased it: a call is cut to the room left, and takes nothing when full.
TEST_F(Scripts, LeaseKeepsTheQueuesConcurrencyLimit) {
  enqueue({job("a"), job("b"), job("c"), job("d")}, 1000);
  const LeaseLimits two{1000, 2, 0, 1};
  auto take = [&] {
    Round round;
    round.add(calls::lease("q", 5000, 10, two));
    auto batch = calls::parse_lease(run(round));
    EXPECT_TRUE(batch);
    return batch ? *batch : LeaseBatch{};
  };
  auto first = take();
  ASSERT_EQ(first.jobs.size(), 2u);
  EXPECT_EQ(first.held_by, LeaseHold::concurrency);
  auto full = take();
  EXPECT_TRUE(full.jobs.empty());
  EXPECT_EQ(full.held_by, LeaseHold::concurrency);
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{first.jobs[0].id, first.jobs[0].token}}));
  run(ack);
  auto after_ack = take();
  ASSERT_EQ(after_ack.jobs.size(), 1u) << "one finished: room for one";
  EXPECT_EQ(after_ack.jobs[0].id, "c");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1");
}

// The rate limit is a token bucket in Redis: `burst` jobs at once, then one
// per 1/rate s; the reply says how long until the next token.
TEST_F(Scripts, LeaseTakesNoMoreThanTheRateLimitsBucketHolds) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 10; ++i) jobs.push_back(job("j" + std::to_string(i)));
  enqueue(jobs, 1000);
  auto take = [&](int64_t now) {
    Round round;
    round.add(calls::lease("q", 50'000, 10, LeaseLimits{now, 0, 10, 3}));  // 10/s, burst 3
    auto batch = calls::parse_lease(run(round));
    EXPECT_TRUE(batch);
    return batch ? *batch : LeaseBatch{};
  };
  auto first = take(1000);
  EXPECT_EQ(first.jobs.size(), 3u) << "a full bucket: the burst";
  EXPECT_EQ(first.held_by, LeaseHold::rate);
  EXPECT_EQ(first.wait_ms, 100);
  auto soon = take(1050);
  EXPECT_TRUE(soon.jobs.empty());
  EXPECT_EQ(soon.held_by, LeaseHold::rate);
  EXPECT_EQ(soon.wait_ms, 50);
  EXPECT_EQ(take(1200).jobs.size(), 2u) << "two tokens in 200 ms";
  EXPECT_EQ(take(10'000).jobs.size(), 3u) << "a long pause refills no more than the burst";
  EXPECT_EQ(take(20'000).jobs.size(), 2u) << "the last two; the ready set ran out";
  EXPECT_EQ(take(20'000).held_by, LeaseHold::none);
}

TEST_F(Scripts, LeaseRefusesBadLimits) {
  enqueue({job("a")}, 1000);
  for (const LeaseLimits& bad : {LeaseLimits{-1, 0, 0, 1}, LeaseLimits{1000, -1, 0, 1}, LeaseLimits{1000, 0, -2, 1},
                                 LeaseLimits{1000, 0, 2e6, 1}, LeaseLimits{1000, 0, 5, 0}}) {
    Round round;
    round.add(calls::lease("q", 5000, 1, bad));
    EXPECT_NE(reply_error(run(round)).find("bad-args"), std::string_view::npos);
  }
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1");
}

// A take-over moves every lease to the grace deadline: a longer one down,
// a shorter or lapsed one up (its worker may still hold the job or its
// result); the encoding pin stays at +inf; a limit bounds each call.
TEST_F(Scripts, AlignLeasesMovesEveryLeaseToTheGraceDeadline) {
  enqueue({qjob("a"), qjob("b"), qjob("c")}, 1000);
  lease(1, 3000);
  lease(1, 60'000);
  lease(1, 5000);
  redis_->cli("ZADD 'dueq:{q}:leased' +inf pin");  // as pin_encoding.lua puts one in
  Round first;
  first.add(calls::align_leases("q", 5000, 1));
  EXPECT_EQ(ints(run(first))->at(0), 1);
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' b"), "5000") << "the longer one first";
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "3000");
  Round second;
  second.add(calls::align_leases("q", 5000, 100));
  EXPECT_EQ(ints(run(second))->at(0), 1);
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "5000");
  Round third;
  third.add(calls::align_leases("q", 5000, 100));
  EXPECT_EQ(ints(run(third))->at(0), 0) << "nothing left to move: the caller stops";
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' pin"), "inf") << "the encoding pin stays";
  for (const auto& bad : {std::vector<std::string>{"x", "1"}, {"5000", "0"}, {"5000", "5001"}, {"5000", "1.5"}}) {
    Command call = script_call(lua::ScriptId::align_leases, {QueueKeys("q").leased});
    for (const auto& arg : bad) call.add(arg);
    Round round;
    round.add(std::move(call));
    EXPECT_NE(reply_error(run(round)).find("bad-args"), std::string_view::npos) << bad[0] << " " << bad[1];
  }
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' c"), "5000");
}
