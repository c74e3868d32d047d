// Per-key limits (lua/lib/keys.lua): keyed records, ordered queues, limits
// per key, parking and releasing turns through ack, nack, reclaim and
// cancel. Run against a real redis-server through the broker's typed calls.
#include "broker/admin/key_commands.hpp"
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;

namespace {

proto::NewJob keyed(std::string id, std::string key, int64_t due = 0, uint32_t max = 0) {
  return proto::NewJob{"q", std::move(id), "t", proto::Bytes{"p"}, due, max, 0, 0, proto::Bytes{std::move(key)}};
}

LeaseLimits ordered_limits(int64_t now) { return {now, 0, 0, 1, 0, true}; }
LeaseLimits per_key(int64_t now, int64_t limit) { return {now, 0, 0, 1, limit, false}; }

std::vector<std::string> ids_of(const LeaseBatch& batch) {
  std::vector<std::string> ids;
  for (const auto& j : batch.jobs) ids.push_back(j.id);
  return ids;
}

}  // namespace

class Keys : public Scripts {
 protected:
  LeaseBatch lease_with(int count, const LeaseLimits& limits) {
    Round round;
    round.add(calls::lease("q", 60'000, count, limits));
    auto batch = calls::parse_lease(run(round));
    EXPECT_TRUE(batch) << (batch ? "" : batch.error().message);
    return batch ? *batch : LeaseBatch{};
  }
  void ack(const LeasedJob& job, int64_t now = 2000) {
    Round round;
    round.add(calls::ack("q", now, 60, {{job.id, job.token}}));
    EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{1, -1})) << job.id;
  }
  NackOutcome nack(const LeasedJob& job, NackMode mode, double jitter = 0) {
    Round round;
    round.add(calls::nack("q", 2000, 1000, 1000, 60, {{job.id, job.token, mode, "failed", jitter}}));
    auto out = calls::parse_nack(run(round));
    EXPECT_TRUE(out && out->size() == 1u);
    return out && !out->empty() ? out->front() : NackOutcome{};
  }
  std::string cli(const std::string& command) { return redis_->cli(command); }
};

TEST_F(Keys, AKeyedRecordCarriesItsKeyAndAKeylessOneIsVersion2AsBefore) {
  JobRecord r{"send", "payload", 1000, 3, 900, 0, 0, 42, std::string("tenant\0\xff", 8)};
  const std::string bytes = encode_job_record(r);
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), 0x9a);
  EXPECT_EQ(bytes[1], 3);
  EXPECT_EQ(*decode_job_record(bytes), r);
  r.key.clear();
  const std::string plain = encode_job_record(r);
  EXPECT_EQ(static_cast<uint8_t>(plain[0]), 0x99);
  EXPECT_EQ(plain[1], 2);
  EXPECT_EQ(*decode_job_record(plain), r);
}

TEST_F(Keys, AnOrderedQueueRunsOneJobPerKeyInDueOrderAndOthersAreNotHeldUp) {
  enqueue({keyed("a2", "A", 200), keyed("a1", "A", 100), keyed("b1", "B", 150), job("free", 120), keyed("a3", "A", 300)},
          1000);
  auto first = lease_with(10, ordered_limits(1000));
  std::vector<std::string> ids = ids_of(first);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"a1", "b1", "free"})) << "one per key, the earliest due; no key: no limit";
  EXPECT_EQ(first.held_by, LeaseHold::keys);
  EXPECT_EQ(first.wait_ms, 1) << "jobs were parked in this call";
  EXPECT_EQ(cli("ZCARD 'dueq:{q}:ready'"), "2") << "parked jobs are still ready";
  auto none = lease_with(10, ordered_limits(1000));
  EXPECT_TRUE(none.jobs.empty());
  EXPECT_EQ(none.held_by, LeaseHold::keys);
  EXPECT_EQ(none.wait_ms, 0) << "every ready job is parked";
  const LeasedJob& a1 = first.jobs[0].id == "a1" ? first.jobs[0] : first.jobs[1].id == "a1" ? first.jobs[1] : first.jobs[2];
  ASSERT_EQ(a1.id, "a1");
  EXPECT_EQ(a1.record.key, "A");
  ack(a1);
  auto second = lease_with(10, ordered_limits(1000));
  EXPECT_EQ(ids_of(second), std::vector<std::string>{"a2"}) << "a1's ack gave A's turn to the next due";
  ack(second.jobs[0]);
  auto third = lease_with(10, ordered_limits(1000));
  EXPECT_EQ(ids_of(third), std::vector<std::string>{"a3"});
}

TEST_F(Keys, AnOrderedJobWaitingForARetryKeepsItsKeysTurnUntilItDies) {
  enqueue({keyed("a1", "A", 100, 2), keyed("a2", "A", 200)}, 1000);
  auto first = lease_with(10, ordered_limits(1000));
  ASSERT_EQ(ids_of(first), std::vector<std::string>{"a1"});
  auto retry = nack(first.jobs[0], NackMode::retry);
  EXPECT_EQ(retry.status, NackStatus::retried);
  EXPECT_EQ(cli("HGET 'dueq:{q}:keys:held' a1"), "oA");
  // Back in the ready set at once (a jitter of 0): a1 goes again, a2 waits.
  auto second = lease_with(10, ordered_limits(3000));
  EXPECT_EQ(ids_of(second), std::vector<std::string>{"a1"}) << "the retry holds A's turn";
  EXPECT_EQ(second.jobs.at(0).attempt, 2u);
  EXPECT_EQ(nack(second.jobs[0], NackMode::retry).status, NackStatus::dead) << "its last attempt";
  auto third = lease_with(10, ordered_limits(3000));
  EXPECT_EQ(ids_of(third), std::vector<std::string>{"a2"}) << "a dead job releases its key";
}

TEST_F(Keys, ARetryInAQueueWithKeyLimitsGivesUpItsTurn) {
  enqueue({keyed("a1", "A", 100, 3), keyed("a2", "A", 200)}, 1000);
  auto first = lease_with(10, per_key(1000, 1));
  ASSERT_EQ(ids_of(first), std::vector<std::string>{"a1"});
  nack(first.jobs[0], NackMode::retry);
  auto second = lease_with(10, per_key(3000, 1));
  ASSERT_EQ(second.jobs.size(), 1u) << "one of A at a time";
  EXPECT_EQ(second.jobs[0].id, "a2") << "a2 went first: not ordered, the retry waits behind it";
}

TEST_F(Keys, KeyLimitsTakeTheKeysOwnLimitOverTheQueueDefault) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back(keyed("big" + std::to_string(i), "big", 100 + i));
  for (int i = 0; i < 5; ++i) jobs.push_back(keyed("small" + std::to_string(i), "small", 200 + i));
  enqueue(jobs, 1000);
  cli("HSET 'dueq:{q}:keys:limits' big 3");
  auto batch = lease_with(100, per_key(1000, 2));
  std::vector<std::string> ids = ids_of(batch);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"big0", "big1", "big2", "small0", "small1"}));
  EXPECT_EQ(cli("HGET 'dueq:{q}:keys:running' big"), "3");
  EXPECT_EQ(cli("HGET 'dueq:{q}:keys:running' small"), "2");
  EXPECT_EQ(cli("ZCARD 'dueq:{q}:keys:parked'"), "5");
}

TEST_F(Keys, AnIdleKeyLeavesNothingBehindEvenAfterACancelledParkedJob) {
  enqueue({keyed("a1", "A", 100), keyed("a2", "A", 200), keyed("a3", "A", 300)}, 1000);
  auto first = lease_with(10, ordered_limits(1000));
  ASSERT_EQ(ids_of(first), std::vector<std::string>{"a1"});
  Round cancel;
  cancel.add(calls::cancel("q", 1500, "a2", 60));
  EXPECT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  ack(first.jobs[0]);
  auto second = lease_with(10, ordered_limits(1000));
  EXPECT_EQ(ids_of(second), std::vector<std::string>{"a3"}) << "the cancelled a2 is passed over";
  ack(second.jobs[0]);
  for (const char* key : {"held", "running", "parked", "parked:per_key"})
    EXPECT_EQ(cli(fmt::format("EXISTS 'dueq:{{q}}:keys:{}'", key)), "0") << key;
}

TEST_F(Keys, AnExpiredLeaseOfAnOrderedQueueKeepsItsTurnAndOneOfLimitsDoesNot) {
  enqueue({keyed("a1", "A", 100, 5), keyed("a2", "A", 200)}, 1000);
  auto first = lease_with(10, ordered_limits(1000));
  ASSERT_EQ(ids_of(first), std::vector<std::string>{"a1"});
  Round reclaim;
  reclaim.add(calls::reclaim("q", 70'000, 100, 60));
  ASSERT_TRUE(calls::parse_reclaim(run(reclaim)));
  auto second = lease_with(10, ordered_limits(70'000));
  EXPECT_EQ(ids_of(second), std::vector<std::string>{"a1"}) << "a1 is redelivered before a2";
}

TEST_F(Keys, ACancelledRetryReleasesItsKey) {
  enqueue({keyed("a1", "A", 100, 5), keyed("a2", "A", 200)}, 1000);
  auto first = lease_with(10, ordered_limits(1000));
  ASSERT_EQ(ids_of(first), std::vector<std::string>{"a1"});
  // Waits for its retry in the schedule, holding A.
  EXPECT_EQ(nack(first.jobs[0], NackMode::retry, 1.0).status, NackStatus::retried);
  EXPECT_TRUE(lease_with(10, ordered_limits(1000)).jobs.empty());
  Round cancel;
  cancel.add(calls::cancel("q", 2500, "a1", 60));
  EXPECT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  EXPECT_EQ(ids_of(lease_with(10, ordered_limits(2500))), std::vector<std::string>{"a2"});
}

TEST_F(Keys, AKeyedJobIsNotLeasedAtEnqueueWhileAKeyHasItsOwnLimit) {
  cli("HSET 'dueq:{q}:keys:limits' A 1");
  std::vector<proto::NewJob> jobs = {keyed("a1", "A"), job("free")};
  std::vector<const proto::NewJob*> ptrs = {&jobs[0], &jobs[1]};
  Round round;
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 60'000, "00000000000000010000000000000002"));
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{1, 3})) << "a1 waits for lease.lua; free is leased at once";
}

TEST_F(Keys, LeaseRefusesBadKeyLimits) {
  const auto args = calls::lease("q", 5000, 1).args();
  // key limit, ordered, fair, key rate, its burst
  using Limits = std::tuple<std::string, std::string, std::string, std::string, std::string>;
  for (const auto& [limit, ordered, fair, rate, burst] : std::vector<Limits>{
           {"-1", "0", "0", "0", "1"}, {"1.5", "0", "0", "0", "1"}, {"x", "0", "0", "0", "1"}, {"0", "2", "0", "0", "1"},
           {"0", "", "0", "0", "1"}, {"0", "0", "2", "0", "1"}, {"0", "0", "", "0", "1"}, {"0", "0", "0", "-1", "1"},
           {"0", "0", "0", "x", "1"}, {"0", "0", "0", "1", "0"}, {"0", "0", "0", "1", "1.5"}, {"0", "0", "0", "0.5", "2"}}) {
    Command call;
    call.mark_fenced();
    for (size_t i = 0; i + 5 < args.size(); ++i) call.add(args[i]);
    call.add(limit).add(ordered).add(fair).add(rate).add(burst);
    Round round;
    round.add(std::move(call));
    const std::string error(reply_error(run(round)));
    if (rate == "0.5") {
      EXPECT_EQ(error, "") << "the same call with good limits";
    } else {
      EXPECT_NE(error.find("bad-args"), std::string::npos) << limit << "/" << ordered << "/" << fair << "/" << rate;
    }
  }
}

TEST_F(Keys, ALeaseRefusedForABadTokenTakesNoTurnAndParksNothing) {
  enqueue({keyed("a1", "A", 100), keyed("a2", "A", 200)}, 1000);
  auto args = calls::lease("q", 5000, 2, ordered_limits(1000)).args();
  Command call;
  call.mark_fenced();
  const size_t tokens_at = 3 + std::stoul(args[2]) + 2;  // EVALSHA, sha, N, N keys, deadline, count, tokens
  for (size_t i = 0; i < args.size(); ++i) call.add(i == tokens_at ? std::string(32, '0') : args[i]);
  Round round;
  round.add(std::move(call));
  EXPECT_NE(std::string(reply_error(run(round))).find("bad-args"), std::string::npos);
  for (const char* key : {"held", "running", "parked"})
    EXPECT_EQ(cli(fmt::format("EXISTS 'dueq:{{q}}:keys:{}'", key)), "0") << key;
  EXPECT_EQ(cli("ZSCORE 'dueq:{q}:ready' a2"), "200") << "a2 was not parked";
}

TEST_F(Keys, KeyListShowsEachKeysTurnsAndWaitingJobsAndKeyLimitIsBounded) {
  enqueue({keyed("a1", "A", 100), keyed("a2", "A", 200), keyed("a3", "A", 300), keyed("b1", "B", 100)}, 1000);
  lease_with(10, ordered_limits(1000));
  Round list;
  list.add(calls::key_list("q", std::nullopt, "0", 100));
  auto page = calls::parse_key_list(run(list));
  ASSERT_TRUE(page);
  std::map<std::string, std::pair<int64_t, int64_t>> rows;
  for (const auto& r : page->rows) rows[r.key] = {r.running, r.parked};
  EXPECT_EQ(rows["A"], (std::pair<int64_t, int64_t>{1, 2}));
  EXPECT_EQ(rows["B"], (std::pair<int64_t, int64_t>{1, 0}));

  Round set;
  set.add(calls::key_limit("q", "A", "4"));
  auto first = calls::parse_key_limit(run(set));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->change, KeyLimitChange::set);
  EXPECT_EQ(first->previous, "") << "none of its own";
  EXPECT_EQ(first->running, 1);
  EXPECT_EQ(cli("HGET 'dueq:{q}:keys:limits' A"), "4");
  cli("EVAL \"for i = 1, 9999 do redis.call('HSET', KEYS[1], 'k' .. i, 1) end\" 1 'dueq:{q}:keys:limits'");
  Round past;
  past.add(calls::key_limit("q", "one-too-many", "2"));
  EXPECT_EQ(calls::parse_key_limit(run(past))->change, KeyLimitChange::too_many_keys);
  EXPECT_EQ(cli("HEXISTS 'dueq:{q}:keys:limits' one-too-many"), "0");
  Round again;
  again.add(calls::key_limit("q", "A", "2"));  // a key that has one may change it
  EXPECT_EQ(calls::parse_key_limit(run(again))->previous, "4");
  Round clear;
  clear.add(calls::key_limit("q", "A", "clear"));
  EXPECT_EQ(calls::parse_key_limit(run(clear))->change, KeyLimitChange::set);
  EXPECT_EQ(cli("HEXISTS 'dueq:{q}:keys:limits' A"), "0");
}

TEST_F(Keys, StatsCountTheKeysHoldingTurnsAndTheJobsWaitingForOne) {
  enqueue({keyed("a1", "A", 100), keyed("a2", "A", 200), keyed("a3", "A", 300), keyed("b1", "B", 100), job("free", 100)},
          1000);
  lease_with(10, ordered_limits(1000));
  Round round;
  round.add(calls::stats("q"));
  auto s = calls::parse_stats("q", run(round));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->keys_running, 2);
  EXPECT_EQ(s->waiting_for_key, 2);
  EXPECT_EQ(s->waiting, 2) << "parked jobs are ready jobs";
  EXPECT_EQ(s->oldest_ready_due_ms, 200) << "the first parked job's due time, without the offset";
  ASSERT_EQ(s->top_keys.size(), 1U) << "B has a turn and nothing waiting";
  EXPECT_EQ(s->top_keys[0].key.data, "A");
  EXPECT_EQ(s->top_keys[0].waiting, 2);
}

// The parked jobs' count per key (keys:parked:per_key) is the key's
// members in keys:parked through parking, the turn passing on, a parked
// job cancelled and a lease that meets an already parked job; the stats
// name the 10 keys with the most, most first, whatever bytes they hold.
TEST_F(Keys, TheTopKeysAreTheTenWithTheMostJobsWaitingAndTheirCountsFollowTheParkedJobs) {
  std::vector<proto::NewJob> jobs;
  std::vector<std::string> keys;
  for (int k = 0; k < 12; ++k) {
    keys.push_back(k == 11 ? std::string("\xff\x00k", 3) : fmt::format("key-{:02}", k));
    for (int j = 0; j <= k; ++j) jobs.push_back(keyed(fmt::format("{}-{}", k, j), keys.back(), 100 + j));
  }
  enqueue_in_batches(jobs, 1000);
  auto counts_match = [&] {
    for (const auto& key : keys) {
      const std::string prefix = fmt::format("{:03}", key.size()) + key;
      Round r;
      r.add(Command{"ZLEXCOUNT", "dueq:{q}:keys:parked", "[" + prefix, "(" + prefix + ":"});
      r.add(Command{"ZSCORE", "dueq:{q}:keys:parked:per_key", key});
      run(r);
      const int64_t members = replies_[0]->integer;
      const int64_t counted = replies_[1]->type == REDIS_REPLY_NIL ? 0 : std::stoll(reply::str(replies_[1].get()));
      if (members != counted) {
        ADD_FAILURE() << "key " << key << ": " << members << " parked, counted " << counted;
        return false;
      }
    }
    return true;
  };
  auto first = lease_with(1000, ordered_limits(1000));
  EXPECT_EQ(first.jobs.size(), 12U) << "one job per key";
  EXPECT_TRUE(counts_match());
  EXPECT_EQ(lease_with(1000, ordered_limits(1000)).jobs.size(), 0U) << "the head is parked: nothing new";
  EXPECT_TRUE(counts_match());
  Round stats;
  stats.add(calls::stats("q"));
  auto s = calls::parse_stats("q", run(stats));
  ASSERT_TRUE(s);
  ASSERT_EQ(s->top_keys.size(), 10U);
  EXPECT_EQ(s->top_keys[0].key.data, keys[11]) << "11 waiting";
  EXPECT_EQ(s->top_keys[0].waiting, 11);
  EXPECT_EQ(s->top_keys[9].key.data, "key-02");
  EXPECT_EQ(s->top_keys[9].waiting, 2);
  // A parked job cancelled stays a member until its key's turn passes it.
  Round cancel;
  cancel.add(calls::cancel("q", 1500, "11-1", 60));
  EXPECT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  for (const auto& job : first.jobs) ack(job);
  EXPECT_TRUE(counts_match());
  for (int round = 0; round < 12; ++round)
    for (const auto& job : lease_with(1000, ordered_limits(1000)).jobs) ack(job);
  EXPECT_TRUE(counts_match());
  EXPECT_EQ(cli("EXISTS 'dueq:{q}:keys:parked:per_key'"), "0") << "no key waits: nothing is left";
}

// A job cancelled while parked leaves its member until its key's turn
// passes it; enqueued again meanwhile (no cancelled entry kept) with the
// same due time, its member is the same one, and parking it again counts
// the key's members whole rather than once more.
TEST_F(Keys, AJobParkedAgainUnderTheMemberItLeftCountsOnce) {
  enqueue({keyed("a1", "A", 100), keyed("a2", "A", 200)}, 1000);
  auto first = lease_with(10, ordered_limits(1000));
  ASSERT_EQ(ids_of(first), std::vector<std::string>{"a1"});
  Round cancel;
  cancel.add(calls::cancel("q", 1500, "a2", 0));
  EXPECT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  enqueue({keyed("a2", "A", 200)}, 1000);
  EXPECT_EQ(lease_with(10, ordered_limits(1000)).jobs.size(), 0U);
  EXPECT_EQ(cli("ZCARD 'dueq:{q}:keys:parked'"), "1");
  EXPECT_EQ(cli("ZSCORE 'dueq:{q}:keys:parked:per_key' A"), "1");
  ack(first.jobs[0]);
  auto second = lease_with(10, ordered_limits(1000));
  EXPECT_EQ(ids_of(second), std::vector<std::string>{"a2"});
  EXPECT_EQ(cli("EXISTS 'dueq:{q}:keys:parked' 'dueq:{q}:keys:parked:per_key'"), "0");
}

// Per-key rate limits (GCRA, lua/lib/keys.lua): a key starts its burst at
// once, then one job per token; its other jobs are parked until the token
// comes (the lease reply says when), and other keys are not held up.
TEST_F(Keys, AKeysRateLimitStartsItsBurstThenOneJobATokenAndOtherKeysGoOn) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back(keyed("a" + std::to_string(i), "A", 100 + i));
  jobs.push_back(keyed("b0", "B", 200));
  enqueue(jobs, 1000);
  auto rated = [](int64_t now) { return LeaseLimits{.now_ms = now, .key_rate = 1, .key_rate_burst = 2}; };
  Round round;
  round.add(calls::lease("q", 60'000, 10, rated(1000)));
  auto first = calls::parse_lease(run(round));
  ASSERT_TRUE(first);
  std::vector<std::string> ids = ids_of(*first);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"a0", "a1", "b0"})) << "A's burst of 2, and B";
  EXPECT_EQ(first->key_wake_ms, 1000) << "A's next token: 1 s on";
  EXPECT_EQ(cli("ZCARD 'dueq:{q}:keys:parked'"), "3");
  Round early;
  early.add(calls::lease("q", 60'000, 10, rated(1500)));
  auto none = calls::parse_lease(run(early));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->jobs.empty());
  EXPECT_EQ(none->key_wake_ms, 500);
  for (int64_t at : {2000, 3000}) {
    Round next;
    next.add(calls::lease("q", 60'000, 10, rated(at)));
    auto batch = calls::parse_lease(run(next));
    ASSERT_TRUE(batch);
    EXPECT_EQ(ids_of(*batch), std::vector<std::string>{at == 2000 ? "a2" : "a3"}) << "one a token, in due order";
    EXPECT_EQ(batch->key_wake_ms, 1000) << "a4 waits for the next";
  }
  // Long after, the bucket is full again: no state is kept for the key.
  Round late;
  late.add(calls::lease("q", 60'000, 10, rated(60'000)));
  auto last = calls::parse_lease(run(late));
  ASSERT_TRUE(last);
  EXPECT_EQ(ids_of(*last), std::vector<std::string>{"a4"});
  EXPECT_EQ(last->key_wake_ms, 0);
  Round idle;
  idle.add(calls::lease("q", 60'000, 10, rated(120'000)));
  ASSERT_TRUE(calls::parse_lease(run(idle)));
  for (const char* key : {"tats", "wakes", "parked"}) EXPECT_EQ(cli(fmt::format("EXISTS 'dueq:{{q}}:keys:{}'", key)), "0") << key;
}

TEST_F(Keys, AKeysOwnRateLimitHoldsInAQueueWithoutOne) {
  Round set;
  set.add(calls::key_limit("q", "slow", "0.5", KeySetting::rate));
  auto outcome = calls::parse_key_limit(run(set));
  ASSERT_TRUE(outcome) << outcome.error().message;
  EXPECT_EQ(cli("HGET 'dueq:{q}:keys:rates' slow"), "0.5");
  Round bad;
  bad.add(calls::key_limit("q", "slow", "0.0001", KeySetting::rate));
  bad.add(calls::key_limit("q", "slow", "1e3", KeySetting::rate));
  auto replies = store_->pipeline(bad.take_commands());
  ASSERT_TRUE(replies);
  for (const auto& r : *replies) EXPECT_NE(std::string(reply_error(r.get())).find("bad-args key_limit"), std::string::npos);
  enqueue({keyed("s0", "slow", 100), keyed("s1", "slow", 101), keyed("f0", "fast", 100), keyed("f1", "fast", 101)}, 1000);
  auto batch = lease_with(10, LeaseLimits{.now_ms = 1000});
  std::vector<std::string> ids = ids_of(batch);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"f0", "f1", "s0"})) << "slow: one now, the next in 2 s; fast: no limit";
  EXPECT_EQ(ids_of(lease_with(10, LeaseLimits{.now_ms = 2999})), std::vector<std::string>{});
  EXPECT_EQ(ids_of(lease_with(10, LeaseLimits{.now_ms = 3000})), std::vector<std::string>{"s1"});
}

// A job with a trace context is a version 5 record: every script finds its
// key as in the others (one job per key of an ordered queue, a scheduled
// one left scheduled), and its fields for a retry; the leased record
// carries the context.
TEST_F(Keys, TracedRecordsOfVersionFiveAreKeyedOrderedAndRetriedAsTheOthers) {
  proto::NewJob first = keyed("t1", "A", 100, 2);
  first.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  first.tracestate = "rojo=1";
  proto::NewJob second = keyed("t2", "A", 200);
  second.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
  proto::NewJob later = keyed("t3", "", 50'000);
  later.traceparent = second.traceparent;
  enqueue({first, second, later}, 1000);
  EXPECT_EQ(static_cast<uint8_t>(cli("HGET 'dueq:{q}:jobs' t1").at(0)), 0x9d) << "stored as version 5";
  auto batch = lease_with(10, ordered_limits(1000));
  ASSERT_EQ(ids_of(batch), std::vector<std::string>{"t1"}) << "t2 waits for A's turn: its key was read";
  EXPECT_EQ(batch.jobs[0].record.traceparent, first.traceparent);
  EXPECT_EQ(batch.jobs[0].record.tracestate, "rojo=1");
  EXPECT_EQ(batch.jobs[0].record.key, "A");
  EXPECT_EQ(nack(batch.jobs[0], NackMode::retry).status, NackStatus::retried) << "max attempts read from the record";
  EXPECT_EQ(cli("ZSCORE 'dueq:{q}:ready' t3"), "") << "due later: scheduled";
}
