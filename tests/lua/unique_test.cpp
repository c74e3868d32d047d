// Unique jobs (lua/lib/unique.lua, docs/keys.md): a job enqueued with a
// unique key holds it until it is first leased, started, done or for a
// period; meanwhile a new job with the key is answered duplicate with the
// holder's id, and a job that dies or is cancelled never keeps holding it.
#include "tests/lua/scripts_fixture.hpp"
#include "tests/support/cluster.hpp"

namespace dueq::testing::scripts {
namespace {

using proto::UniqueUntil;

proto::NewJob unique_job(std::string id, std::string ukey, UniqueUntil until, int64_t due = 0, int64_t for_ms = 0,
                         uint32_t max = 3) {
  auto j = job(std::move(id), due, max);
  j.unique_key.data = std::move(ukey);
  j.unique_until = until;
  j.unique_for_ms = for_ms;
  return j;
}

struct Answer {
  std::vector<calls::EnqueueReply> codes;
  std::vector<std::string> holders;
};

class Unique : public Scripts {
 protected:
  Answer put(const std::vector<proto::NewJob>& jobs, int64_t now = 1000) {
    std::vector<const proto::NewJob*> ptrs;
    for (const auto& j : jobs) ptrs.push_back(&j);
    Round round;
    round.add(calls::enqueue("q", ptrs, now, 3, 0));
    const redisReply* r = run(round);
    auto codes = calls::parse_enqueue(r, jobs.size());
    EXPECT_TRUE(codes) << reply_error(r);
    return codes ? Answer{*codes, calls::enqueue_holders(r, jobs.size())} : Answer{};
  }
  // The one job `put` answers: its code, and the holder when it is held.
  std::pair<calls::EnqueueReply, std::string> one(const proto::NewJob& j, int64_t now = 1000) {
    auto a = put({j}, now);
    if (a.codes.size() != 1) return {calls::EnqueueReply::backlog_full, "(no answer)"};
    return {a.codes[0], a.holders.empty() ? "" : a.holders[0]};
  }
  LeasedJob lease_one() {
    auto l = lease(1, 60'000);
    EXPECT_EQ(l.size(), 1U);
    return l.empty() ? LeasedJob{} : l[0];
  }
  void ack(const LeasedJob& j) {
    Round round;
    round.add(calls::ack("q", 2000, 60, {{j.id, j.token}}));
    EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{1, -1}));
  }
  bool nothing_held() { return redis_->cli("KEYS 'dueq:{q}:unique*'").empty(); }
};

constexpr auto kAccepted = calls::EnqueueReply::accepted;
constexpr auto kHeld = calls::EnqueueReply::unique_held;

TEST_F(Unique, UntilWaitingHoldsWhileScheduledAndReadyAndGoesAtTheLease) {
  EXPECT_EQ(one(unique_job("a", "U", UniqueUntil::waiting, 5000)).first, kAccepted);
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::waiting)), std::make_pair(kHeld, std::string("a")));
  EXPECT_EQ(one(unique_job("c", "other", UniqueUntil::waiting)).first, kAccepted) << "another key is free";
  EXPECT_EQ(one(job("d", 0)).first, kAccepted) << "a job without one is not limited";
  Round promote;
  promote.add(calls::promote("q", 6000, 100));
  run(promote);
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::waiting), 6000).first, kHeld) << "ready still waits";
  for (auto l = lease(10, 60'000); const auto& j : l) EXPECT_NE(j.id, "b");
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::waiting), 6000).first, kAccepted) << "a leased job waits no more";
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:unique' b"), "wU");
}

TEST_F(Unique, UntilStartedHoldsThroughTheLeaseAndGoesWhenAWorkerAnnouncesTheStart) {
  EXPECT_EQ(one(unique_job("a", "U", UniqueUntil::started)).first, kAccepted);
  const auto a = lease_one();
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::started)).first, kHeld);
  record_start({a}, 60'000);
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::started)).first, kAccepted);
}

TEST_F(Unique, UntilDoneHoldsThroughStartAndRetryAndGoesWhenDoneDeadOrCancelled) {
  EXPECT_EQ(one(unique_job("a", "U", UniqueUntil::done)).first, kAccepted);
  auto a = lease_one();
  record_start({a}, 60'000);
  Round retry;
  retry.add(calls::nack("q", 2000, 0, 0, 60, {{"a", a.token, NackMode::retry, "again", 0}}));
  ASSERT_EQ(calls::parse_nack(run(retry))->at(0).status, NackStatus::retried);
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::done)), std::make_pair(kHeld, std::string("a"))) << "a retry still holds";
  a = lease_one();
  ack(a);
  EXPECT_TRUE(nothing_held()) << "done: the key costs nothing";
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::done, 0, 0, 1)).first, kAccepted);
  auto b = lease_one();
  Round dies;
  dies.add(calls::nack("q", 2000, 0, 0, 60, {{"b", b.token, NackMode::retry, "boom", 0}}));
  ASSERT_EQ(calls::parse_nack(run(dies))->at(0).status, NackStatus::dead);
  EXPECT_TRUE(nothing_held()) << "a dead job holds nothing";
  EXPECT_EQ(one(unique_job("c", "U", UniqueUntil::done, 90'000)).first, kAccepted);
  Round cancel;
  cancel.add(calls::cancel("q", 2000, "c", 60));
  EXPECT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  EXPECT_TRUE(nothing_held()) << "a cancelled job holds nothing";
}

TEST_F(Unique, APeriodHoldsPastTheJobsEndButNotPastItsCancelOrTheTime) {
  EXPECT_EQ(one(unique_job("a", "U", UniqueUntil::period, 0, 60'000)).first, kAccepted);
  const int64_t ttl = std::stoll(redis_->cli("PTTL 'dueq:{q}:unique:U'"));
  EXPECT_GT(ttl, 50'000);
  EXPECT_LE(ttl, 60'000);
  ack(lease_one());
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::period, 0, 60'000)), std::make_pair(kHeld, std::string("a")))
      << "done within its period: one per period";
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:unique'"), "0") << "the job's own entry went with it";
  // The period is Redis's expiry: once it passes the key is free.
  redis_->cli("PEXPIRE 'dueq:{q}:unique:U' 1");
  EXPECT_TRUE(eventually([&] { return redis_->cli("EXISTS 'dueq:{q}:unique:U'") == "0"; }, std::chrono::seconds(5)));
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::period, 90'000, 60'000)).first, kAccepted);
  Round cancel;
  cancel.add(calls::cancel("q", 2000, "b", 60));
  EXPECT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  EXPECT_TRUE(nothing_held()) << "a cancelled job's period ends with it";
}

TEST_F(Unique, InOneBatchTheFirstTakesTheKeyAndAnIdAskedAgainIsADuplicateByItsId) {
  auto a = put({unique_job("a", "U", UniqueUntil::done, 5000), unique_job("b", "U", UniqueUntil::done, 5000),
                unique_job("c", "V", UniqueUntil::done, 5000)});
  EXPECT_EQ(a.codes, (std::vector{kAccepted, kHeld, kAccepted}));
  EXPECT_EQ(a.holders, std::vector<std::string>{"a"});
  EXPECT_EQ(one(unique_job("a", "U", UniqueUntil::done, 5000)).first, calls::EnqueueReply::duplicate);
}

TEST_F(Unique, AHolderThatIsGoneWithoutLettingGoHoldsNothing) {
  EXPECT_EQ(one(unique_job("a", "U", UniqueUntil::done)).first, kAccepted);
  redis_->cli("ZREM 'dueq:{q}:ready' a");
  redis_->cli("HDEL 'dueq:{q}:jobs' a");
  EXPECT_EQ(one(unique_job("b", "U", UniqueUntil::done)).first, kAccepted);
  EXPECT_EQ(redis_->cli("GET 'dueq:{q}:unique:U'").substr(1), std::to_string(schedule_partition("b")) + ":b");
}

TEST_F(Unique, AJobLeasedAtItsEnqueueHoldsNoKeyUntilWaitingButHoldsOneUntilDone) {
  std::vector<proto::NewJob> jobs = {unique_job("a", "W", UniqueUntil::waiting), unique_job("b", "D", UniqueUntil::done)};
  std::vector<const proto::NewJob*> ptrs = {&jobs[0], &jobs[1]};
  Round round;
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 60'000, "00000000000000010000000000000002"));
  EXPECT_EQ(*calls::parse_enqueue(run(round), 2),
            (std::vector{calls::EnqueueReply::accepted_and_leased, calls::EnqueueReply::accepted_and_leased}));
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:unique:W'"), "0");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:unique' b"), "dD");
}

// Debounce: while the job holding the key is scheduled, a new job with the
// key gives it its record (payload) and due time instead, at most the max
// wait after its first enqueue; in one call too; a job no longer scheduled
// holds nothing, and its lease ends its hold.
TEST_F(Unique, ADebouncedJobTakesTheLatestPayloadAndDueTimeUpToItsDeadline) {
  auto with = [](std::string id, std::string payload, int64_t due) {
    auto j = unique_job(std::move(id), "D", UniqueUntil::debounce, due, 10'000);
    j.payload.data = std::move(payload);
    return j;
  };
  EXPECT_EQ(one(with("a", "first", 6'000), 1'000).first, kAccepted);  // deadline 11,000
  EXPECT_EQ(one(with("b", "second", 7'000), 2'000), std::make_pair(calls::EnqueueReply::debounced, std::string("a")));
  EXPECT_EQ(field("a", "r"), "7000");
  EXPECT_EQ(field("a", "p"), "second");
  EXPECT_EQ(field("b", "s"), "") << "b was not made a job";
  EXPECT_EQ(one(with("c", "third", 20'000), 3'000).first, calls::EnqueueReply::debounced);
  EXPECT_EQ(field("a", "r"), "11000") << "no later than its deadline";
  EXPECT_EQ(field("a", "p"), "third");
  auto batch = put({unique_job("x", "E", UniqueUntil::debounce, 6'000, 10'000), with("y", "later", 8'000)});
  EXPECT_EQ(batch.codes.size(), 2U);  // another key: ADebouncedJobsFirstCall... below
  Round promote;
  promote.add(calls::promote("q", 11'000, 100));
  run(promote);
  EXPECT_EQ(field("a", "s"), "ready");
  EXPECT_EQ(one(with("d", "fourth", 30'000), 11'000).first, kAccepted) << "a is ready: it holds nothing";
  EXPECT_EQ(one(with("now", "fifth", 0), 11'000).first, calls::EnqueueReply::debounced) << "into d, due now";
  EXPECT_EQ(field("d", "r"), "11000");
  Round promote_d;
  promote_d.add(calls::promote("q", 11'000, 100));
  run(promote_d);
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:unique'"), "3") << "a and x (ready: holding nothing) and d keep entries until leased";
  EXPECT_EQ(lease(10, 60'000).size(), 3U);  // a, x and d
  EXPECT_TRUE(nothing_held()) << "a lease ends a debounced job's hold";
}

TEST_F(Unique, ADebouncedJobsFirstCallSharesItsKeyWithTheNextJobOfTheCall) {
  auto b = unique_job("y", "E", UniqueUntil::debounce, 8'000, 10'000);
  b.payload.data = "later";
  auto batch = put({unique_job("x", "E", UniqueUntil::debounce, 6'000, 10'000), b});
  EXPECT_EQ(batch.codes, (std::vector{kAccepted, calls::EnqueueReply::debounced}));
  EXPECT_EQ(batch.holders, std::vector<std::string>{"x"});
  EXPECT_EQ(field("x", "r"), "8000");
  EXPECT_EQ(field("x", "p"), "later");
  EXPECT_EQ(field("y", "s"), "");
}

// A debounced holder whose entry is gone (a store edited by hand) takes the
// new job's due time uncapped, never a due time of 0.
TEST_F(Unique, ADebouncedHolderWithoutItsEntryTakesTheNewDueTime) {
  EXPECT_EQ(one(unique_job("a", "D", UniqueUntil::debounce, 6'000, 10'000), 1'000).first, kAccepted);
  redis_->cli("HDEL 'dueq:{q}:unique' a");
  EXPECT_EQ(one(unique_job("b", "D", UniqueUntil::debounce, 30'000, 10'000), 2'000).first, calls::EnqueueReply::debounced);
  EXPECT_EQ(field("a", "r"), "30000");
}

TEST_F(Unique, BadUniqueArgumentsWriteNothing) {
  const std::vector<std::vector<std::string>> bad = {
      {"1", "U", "x", "0"}, {"1", "U", "p", "0"}, {"1", "U", "b", "0"}, {"1", "U", "d", "5"}, {"2", "U", "d", "0"}, {"0", "U", "d", "0"},
      {"1", "", "d", "0"},  {"1", std::string(129, 'k'), "d", "0"}};
  for (const auto& u : bad) {
    std::vector<proto::NewJob> jobs = {job("a", 5000)};
    std::vector<const proto::NewJob*> ptrs = {&jobs[0]};
    Round round;
    round.add(calls::enqueue("q", ptrs, 1000, 3, 0));
    auto sent = round.take_commands();
    Command call;
    const auto& args = sent[0].args();
    for (size_t i = 0; i + 1 < args.size(); ++i) call.add(args[i]);
    for (const auto& a : u) call.add(a);
    call.add("1");
    call.mark_fenced();
    Round refused;
    refused.add(std::move(call));
    EXPECT_NE(std::string(reply_error(run(refused))).find("bad-args enqueue"), std::string::npos) << u[2] << u[3];
    EXPECT_EQ(redis_->cli("KEYS 'dueq:{q}:s*'") + redis_->cli("KEYS 'dueq:{q}:unique*'"), "") << "nothing written";
  }
}

}  // namespace
}  // namespace dueq::testing::scripts
