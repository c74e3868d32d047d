// How a delivery ends: ack, nack, extend (a recorded start), reclaim of
// expired leases, and the sweep of done ids; which attempts each uses.
// Run against a real redis-server through the broker's typed calls
// (docs/protocol.md's state diagram, rule by rule).
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;
using dueq::proto::StartCheck;

TEST_F(Scripts, AckWithTheCurrentTokenCompletesTheJob) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::ack("q", 2000, 60, {{"a", l[0].token}}));
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(field("a", "s"), "done");
  EXPECT_EQ(field("a", "f"), "2000");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:leased'"), "0");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' done"), "1");
  // Nothing of the job is kept but its id in the done set.
  for (const char* hash : {"jobs", "tokens", "attempts"})
    EXPECT_EQ(redis_->cli(std::string("HLEN 'dueq:{q}:") + hash + "'"), "0") << hash;
}

TEST_F(Scripts, ADoneJobStaysADuplicateUntilTheSweepForgetsIt) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{"a", l[0].token}}));
  run(ack);
  EXPECT_EQ(enqueue({job("a")}, 3000), std::vector<int64_t>{0});  // a producer's retry
  Round early;
  early.add(calls::sweep("q", 2000, 100, 1000, 2000));  // finished at 2000: not before the cutoff
  EXPECT_EQ(*ints(run(early)), (std::vector<int64_t>{0, 0, 0, 2000, 0, -1, 0, 0}));  // 2000: the earliest finish left
  Round late;
  late.add(calls::sweep("q", 2001, 100, 1000, 2001));
  EXPECT_EQ(*ints(run(late)), (std::vector<int64_t>{1, 0, 0, -1, 0, -1, 0, 0}));  // -1: nothing left to sweep
  EXPECT_EQ(field("a", "s"), "");
  EXPECT_EQ(enqueue({job("a")}, 3000), std::vector<int64_t>{1});  // a new job after retention
}

// A done job's result is kept beside its done entry (any bytes), read by
// job_ends.lua with how it ended, and goes with the entry at the sweep; with
// no retention none is kept.
TEST_F(Scripts, AnAcksResultIsKeptWithTheDoneEntryAndSweptWithIt) {
  enqueue({job("a"), job("b"), job("c")}, 1000);
  auto l = lease(3, 5000);
  const std::string result("r\0\xff", 3);
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{"a", l[0].token, 0, "", result}, {"b", l[1].token}}));
  EXPECT_EQ(*ints(run(ack)), (std::vector<int64_t>{1, 1, -1}));
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:results'"), "1") << "an empty result is not stored";
  Round ends;
  ends.add(calls::job_ends("q", {"a", "b", "c", "nobody"}));
  auto read = calls::parse_job_ends(run(ends), 4);
  ASSERT_TRUE(read) << read.error().message;
  ASSERT_TRUE((*read)[0]);
  EXPECT_EQ((*read)[0]->state, "done");
  EXPECT_EQ((*read)[0]->result, result);
  EXPECT_EQ((*read)[0]->finished_ms, 2000);
  ASSERT_TRUE((*read)[1]);
  EXPECT_EQ((*read)[1]->result, "");
  EXPECT_FALSE((*read)[2]) << "leased: not ended";
  ASSERT_TRUE((*read)[3]);
  EXPECT_EQ((*read)[3]->state, "unknown");
  Round sweep;
  sweep.add(calls::sweep("q", 2001, 100, 1000, 2001));
  run(sweep);
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:results'"), "0") << "the result went with its done entry";
  Round none;
  none.add(calls::ack("q", 3000, 0, {{"c", l[2].token, 0, "", "kept?"}}));
  run(none);
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:results'"), "0") << "no retention: no result kept";
  Round refused;
  refused.add(Command{"EVAL", lua::script(lua::ScriptId::job_ends).source, "7", "a", "b", "c", "d", "e", "f", "g", "1", "a", "99999"});
  EXPECT_NE(reply_error(run(refused)).find("bad-args"), std::string::npos);
}

TEST_F(Scripts, SweepIsBoundedByItsLimitAndRefusesBadArguments) {
  for (const char* id : {"a", "b", "c"}) redis_->cli(std::string("ZADD 'dueq:{q}:done' 10 ") + id);
  Round round;
  round.add(calls::sweep("q", 100, 2, 1000, 100));
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{2, 0, 0, 10, 0, -1, 0, 0}));
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:done'"), "1");
  Round bad;
  bad.add(calls::sweep("q", 100, 0, 1000, 100));
  EXPECT_NE(reply_error(run(bad)).find("bad-args"), std::string_view::npos);
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:done'"), "1");
  Round no_max;
  no_max.add(calls::sweep("q", 100, 10, 0, 100));
  EXPECT_NE(reply_error(run(no_max)).find("bad-args"), std::string_view::npos);
  // The broker never sends a window that starts before the cutoff; the
  // script refuses one all the same.
  const auto args = calls::sweep("q", 100, 10, 10, 100).args();
  Command early_window;
  early_window.mark_fenced();  // rebuilt from a script_call's arguments
  for (size_t i = 0; i < args.size(); ++i) early_window.add(i + 3 == args.size() ? std::string("99") : args[i]);
  Round window_before_cutoff;
  window_before_cutoff.add(std::move(early_window));
  EXPECT_NE(reply_error(run(window_before_cutoff)).find("bad-args sweep"), std::string_view::npos);
  // Nor a history cutoff before the cutoff, nor a history max past the max
  // kept or below 0 (the last two arguments).
  for (const auto& [from_end, value] : std::vector<std::pair<size_t, std::string>>{{2, "99"}, {1, "11"}, {1, "-1"}, {1, "x"}}) {
    Command bad_history;
    bad_history.mark_fenced();
    for (size_t i = 0; i < args.size(); ++i) bad_history.add(i + from_end == args.size() ? value : args[i]);
    Round refused;
    refused.add(std::move(bad_history));
    EXPECT_NE(reply_error(run(refused)).find("bad-args sweep"), std::string_view::npos) << value;
  }
}

// Done and cancelled ids are kept for the retention and no more than MAX of
// each: the oldest go first, within the limit per call.
TEST_F(Scripts, SweepKeepsAtMostMaxDoneAndCancelledIds) {
  for (int i = 0; i < 10; ++i) redis_->cli("ZADD 'dueq:{q}:done' " + std::to_string(1000 + i) + " d" + std::to_string(i));
  for (int i = 0; i < 3; ++i) redis_->cli("ZADD 'dueq:{q}:cancelled' " + std::to_string(1000 + i) + " c" + std::to_string(i));
  Round first;
  // Nothing past retention; 6 done over the max, 4 per call, all before
  // their retention ended (counted).
  first.add(calls::sweep("q", 0, 4, 4, 2000));
  EXPECT_EQ(*ints(run(first)), (std::vector<int64_t>{4, 0, 4, 1000, 0, -1, 0, 0}));  // c0 finished at 1000
  Round second;
  second.add(calls::sweep("q", 0, 4, 4, 2000));
  EXPECT_EQ(*ints(run(second)), (std::vector<int64_t>{2, 0, 2, 1000, 0, -1, 0, 0}));
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:done' 0 -1"), "d6\nd7\nd8\nd9");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' forgotten_early"), "6");
  Round both;
  // The time cutoff takes d6 and every cancelled id; the max takes d7 too.
  both.add(calls::sweep("q", 1007, 100, 2, 2000));
  EXPECT_EQ(*ints(run(both)), (std::vector<int64_t>{2, 3, 1, 1008, 0, -1, 0, 0}));
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:done' 0 -1"), "d8\nd9");
}

// Ids finished within the duplicate window stay whatever the max says: a
// resent enqueue is answered duplicate for that long at any rate.
TEST_F(Scripts, SweepKeepsIdsFinishedWithinTheDuplicateWindowPastTheMax) {
  for (int i = 0; i < 10; ++i) redis_->cli("ZADD 'dueq:{q}:done' " + std::to_string(1000 + i) + " d" + std::to_string(i));
  Round round;
  round.add(calls::sweep("q", 0, 100, 4, 1005));  // the window began at 1005: d5..d9 stay
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{5, 0, 5, 1005, 0, -1, 0, 0}));
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:done' 0 -1"), "d5\nd6\nd7\nd8\nd9");
  Round again;
  again.add(calls::sweep("q", 0, 100, 4, 1005));
  EXPECT_EQ(*ints(run(again)), (std::vector<int64_t>{0, 0, 0, 1005, 0, -1, 0, 0}));
}

TEST_F(Scripts, AckWithAStaleTokenIsACountedNoOp) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::ack("q", 2000, 60, {{"a", l[0].token + 1}}));
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(field("a", "s"), "leased");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' stale_acks"), "1");
  // A second ack of a finished job is stale too.
  Round good;
  good.add(calls::ack("q", 2000, 0, {{"a", l[0].token}}));
  run(good);
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' a"), "0");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:done'"), "0");  // retention 0 keeps no entry
  Round again;
  again.add(calls::ack("q", 2000, 0, {{"a", l[0].token}}));
  EXPECT_EQ(*ints(run(again)), (std::vector<int64_t>{0, -1}));
}

TEST_F(Scripts, NackRetriesWithBackoffWithinTheJitterBound) {
  enqueue({job("a", 0, 5)}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::nack("q", 2000, 1000, 60'000, 60, {{"a", l[0].token, NackMode::retry, "bo\tom\n", 0.5, "w\\1"}}));
  auto out = *calls::parse_nack(run(round));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, NackStatus::retried);
  EXPECT_EQ(out[0].due_ms, 2000 + 500);  // attempt 1: base * 2^0 * 0.5
  EXPECT_EQ(field("a", "s"), "scheduled");
  EXPECT_EQ(field("a", "e"), "bo\tom\n");
  // One line per entry: its worker and reason escaped (common/job_document.cpp reads it).
  EXPECT_EQ(field("a", "el"), "attempt 1\t2000\tw\\\\1\tbo\\tom\\n\n");
}

TEST_F(Scripts, NackDeadLettersWhenAttemptsAreUsedUpKeepingPayloadAndReasons) {
  enqueue({job("a", 0, 2)}, 1000);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto l = lease(1, 5000);
    ASSERT_EQ(l.size(), 1u);
    Round round;
    round.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::retry, "err" + std::to_string(attempt), 0}}));
    auto out = *calls::parse_nack(run(round));
    EXPECT_EQ(out[0].status, attempt == 2 ? NackStatus::dead : NackStatus::retried);
  }
  EXPECT_EQ(field("a", "s"), "dead");
  EXPECT_EQ(field("a", "p"), "payload-x");
  EXPECT_EQ(field("a", "e"), "attempts exhausted (2): err2");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:dead'"), "1");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' dead"), "1");
}

TEST_F(Scripts, NackModeDeadSkipsRetriesAndModeNowRequeuesAtOnce) {
  enqueue({job("a", 0, 5), job("b", 0, 5)}, 1000);
  auto l = lease(2, 5000);
  Round round;
  round.add(calls::nack("q", 2000, 1000, 5000, 60,
             {{"a", l[0].token, NackMode::dead, "bad payload", 0}, {"b", l[1].token, NackMode::now, "worker lost", 0.9}}));
  auto out = *calls::parse_nack(run(round));
  EXPECT_EQ(out[0].status, NackStatus::dead);
  EXPECT_EQ(out[1].status, NackStatus::retried);
  EXPECT_EQ(out[1].due_ms, 2000);
  EXPECT_EQ(field("a", "e"), "bad payload");
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:ready' 0 -1"), "b");
}

TEST_F(Scripts, NackWithAStaleTokenChangesNothing) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token + 7, NackMode::dead, "x", 0}}));
  EXPECT_EQ(calls::parse_nack(run(round))->at(0).status, NackStatus::stale);
  EXPECT_EQ(field("a", "s"), "leased");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' stale_acks"), "1");
}

TEST_F(Scripts, NackWithBadModeOrJitterIsRefused) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::retry, "x", 1.5}}));
  EXPECT_NE(reply_error(run(round)).find("bad-args"), std::string_view::npos);
  EXPECT_EQ(field("a", "s"), "leased");
}

TEST_F(Scripts, ExtendMovesTheDeadlineOnlyForTheCurrentToken) {
  enqueue({job("a"), job("b")}, 1000);
  auto l = lease(2, 5000);
  Round round;
  round.add(calls::extend("q", 20'000, LeaseReport::held, {{"a", l[0].token}, {"b", l[1].token + 1}}));
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "20000");
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' b"), "5000");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' stale_extends"), "1");
}

TEST_F(Scripts, ReclaimCountsAnExpiredLeaseWhoseStartWasRecordedAsAnAttemptAndDeadLettersPoisonJobs) {
  enqueue({job("a", 0, 1), job("b", 0, 3)}, 1000);
  record_start(lease(2, 5000), 5000);
  Round early;
  early.add(calls::reclaim("q", 4999, 100, 60));
  auto none = *calls::parse_reclaim(run(early));
  EXPECT_EQ(none.requeued + none.dead, 0);
  EXPECT_EQ(none.next_deadline_ms, 5000);
  Round round;
  round.add(calls::reclaim("q", 5000, 100, 60));
  auto r = *calls::parse_reclaim(run(round));
  EXPECT_EQ(r.requeued, 1);
  EXPECT_EQ(r.dead, 1);
  EXPECT_EQ(r.next_deadline_ms, -1);
  EXPECT_EQ(field("a", "s"), "dead");
  EXPECT_EQ(field("b", "s"), "ready");
  EXPECT_NE(field("b", "el").find("lease expired"), std::string::npos);
}

// A TASKS frame lost on the wire, a job buffered by a worker that died, a
// broker gone between lease and dispatch: no start was recorded, so the
// expiry uses no attempt however often it happens, and every later lease
// asks its worker to announce the start. Once a start is recorded, the next
// expiry counts: a job that kills its worker ends dead after its attempts.
TEST_F(Scripts, AnExpiredDeliveryNeverSeenToStartUsesNoAttemptAndAsksTheNextWorkerToAnnounceTheStart) {
  enqueue({job("a", 0, 1)}, 1000);
  for (int i = 1; i <= 5; ++i) {
    auto l = lease(1, int64_t{5000} * i);
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(l[0].attempt, 1u) << "delivery " << i;
    EXPECT_EQ(l[0].start_check, i == 1 ? StartCheck::none : i == 2 ? StartCheck::announce : StartCheck::announce_alone)
        << "delivery " << i;
    Round round;
    round.add(calls::reclaim("q", int64_t{5000} * i, 100, 60));
    auto r = *calls::parse_reclaim(run(round));
    EXPECT_EQ(r.requeued, 1);
    EXPECT_EQ(r.not_counted, 1);
    EXPECT_EQ(r.dead, 0);
    EXPECT_EQ(field("a", "s"), "ready");
    EXPECT_EQ(field("a", "a"), "0");
  }
  EXPECT_NE(field("a", "el").find("unstarted 5\t"), std::string::npos) << field("a", "el");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' unconfirmed"), "5");
  auto sixth = lease(1, 40'000);
  ASSERT_EQ(sixth.size(), 1u);
  EXPECT_EQ(sixth[0].start_check, StartCheck::announce_alone);
  record_start(sixth, 40'000);
  Round expire;
  expire.add(calls::reclaim("q", 40'000, 100, 60));
  auto r = *calls::parse_reclaim(run(expire));
  EXPECT_EQ(r.dead, 1);
  EXPECT_EQ(r.not_counted, 0);
  EXPECT_EQ(field("a", "s"), "dead");
  EXPECT_NE(field("a", "e").find("attempts exhausted (1)"), std::string::npos) << field("a", "e");
}

// A heartbeat's extension ("held") records no start: a buffered job listed
// as held and lost with its worker still goes back free.
TEST_F(Scripts, ExtendingALeaseForAHeldJobRecordsNoStart) {
  enqueue({job("a", 0, 1)}, 1000);
  auto l = lease(1, 5000);
  ASSERT_EQ(l.size(), 1u);
  Round held;
  held.add(calls::extend("q", 9000, LeaseReport::held, {{"a", l[0].token}}));
  EXPECT_EQ(*ints(run(held)), (std::vector<int64_t>{1}));
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "9000");
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:started'"), "0");
  Round lost;
  lost.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::lost, "worker lost", 0}}));
  EXPECT_EQ(calls::parse_nack(run(lost))->at(0).status, NackStatus::retried);
  EXPECT_EQ(field("a", "s"), "ready");
  EXPECT_EQ(field("a", "a"), "0");
}

// The broker says "lost" for a job of a dead worker that it did not see
// start; Redis still counts it when it holds the start (the broker that saw
// it may have been replaced).
TEST_F(Scripts, AJobOfALostWorkerUsesNoAttemptUnlessRedisHoldsItsStart) {
  const auto out = lose_a_and_started_b(NackMode::lost);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status, NackStatus::retried);
  EXPECT_EQ(out[1].status, NackStatus::dead);
  EXPECT_EQ(field("a", "s"), "ready");
  EXPECT_EQ(field("a", "a"), "0");
  EXPECT_EQ(field("b", "s"), "dead");
}

// "lost_beside": the broker did not see the job start and its worker held
// others beside it. A start Redis holds (an earlier broker recorded it) is
// not charged then, and the next delivery runs alone; without a recorded
// start it is an unstarted delivery as under "lost".
TEST_F(Scripts, AStartAnEarlierBrokerRecordedIsNotChargedToAJobLostBesideOthers) {
  const auto out = lose_a_and_started_b(NackMode::lost_beside);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status, NackStatus::retried);
  EXPECT_EQ(out[1].status, NackStatus::retried) << "b was charged its only attempt";
  EXPECT_EQ(field("a", "a"), "0");
  EXPECT_EQ(field("b", "a"), "0");
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:started'"), "0");
  auto again = lease(2, 9000);
  ASSERT_EQ(again.size(), 2u);
  const LeasedJob& a2 = again[0].id == "a" ? again[0] : again[1];
  const LeasedJob& b2 = again[0].id == "a" ? again[1] : again[0];
  EXPECT_EQ(a2.start_check, StartCheck::announce);
  EXPECT_EQ(b2.start_check, StartCheck::announce_alone);
}

// A worker died running several announced jobs: none of them is known to
// have killed it, so none is charged though Redis holds their starts, and
// each one's next delivery runs alone among the announced ones.
TEST_F(Scripts, JobsOfAWorkerThatDiedRunningSeveralAnnouncedOnesAreNotChargedAndRunAloneNext) {
  enqueue({job("a", 0, 1), job("b", 0, 1)}, 1000);
  auto l = lease(2, 5000);
  ASSERT_EQ(l.size(), 2u);
  record_start(l, 9000);
  Round round;
  round.add(calls::nack("q", 2000, 0, 0, 60,
                        {{l[0].id, l[0].token, NackMode::shared, "worker died", 0},
                         {l[1].id, l[1].token, NackMode::shared, "worker died", 0}}));
  auto out = *calls::parse_nack(run(round));
  EXPECT_EQ(out.at(0).status, NackStatus::retried);
  EXPECT_EQ(out.at(1).status, NackStatus::retried);
  EXPECT_EQ(field("a", "a"), "0");
  EXPECT_EQ(field("b", "a"), "0");
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:started'"), "0");
  auto again = lease(2, 9000);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].start_check, StartCheck::announce_alone);
  EXPECT_EQ(again[1].start_check, StartCheck::announce_alone);
}

TEST_F(Scripts, FinishedOrReplayedJobsLeaveNoStartOrUnstartedCount) {
  enqueue({job("a"), job("b")}, 1000);
  lease(2, 5000);
  Round expire;
  expire.add(calls::reclaim("q", 5000, 100, 60));
  EXPECT_EQ(calls::parse_reclaim(run(expire))->not_counted, 2);
  auto l = lease(2, 9000);
  ASSERT_EQ(l.size(), 2u);
  record_start(l, 9000);
  EXPECT_EQ(redis_->cli("SCARD 'dueq:{q}:started'"), "2");
  const LeasedJob& a = l[0].id == "a" ? l[0] : l[1];
  const LeasedJob& b = l[0].id == "a" ? l[1] : l[0];
  Round finish;
  finish.add(calls::ack("q", 6000, 60, {{"a", a.token}}));
  finish.add(calls::nack("q", 6000, 0, 0, 60, {{"b", b.token, NackMode::dead, "bad", 0}}));
  run(finish);
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:started'"), "0");
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:unconfirmed' a"), "0");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:unconfirmed' b"), "1");  // kept with the dead job, for a look
  Round replay;
  replay.add(calls::replay("q", 7000, {"b"}));
  EXPECT_EQ(*strs(run(replay)), std::vector<std::string>{"b"});
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:unconfirmed'"), "0");
}

TEST_F(Scripts, ExtendRefusesAnythingButHeldOrStarted) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  const auto args = calls::extend("q", 9000, LeaseReport::held, {{"a", l[0].token}}).args();
  Command bad;
  bad.mark_fenced();  // rebuilt from a script_call's arguments
  for (size_t i = 0; i < args.size(); ++i) bad.add(i == args.size() - 4 ? std::string("running") : args[i]);
  Round round;
  round.add(std::move(bad));
  EXPECT_NE(reply_error(run(round)).find("bad-args extend"), std::string_view::npos);
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "5000");
}

TEST_F(Scripts, StatsCountEveryState) {
  enqueue({job("a"), job("b"), job("c", 10'000), job("d", 1500)}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::stats("q"));
  auto s = *calls::parse_stats("q", run(round));
  EXPECT_EQ(s.scheduled, 2);  // c, and d (overdue, not promoted yet)
  EXPECT_EQ(s.waiting, 1);    // b
  EXPECT_EQ(s.in_flight, 1);  // a
  EXPECT_EQ(s.accepted, 4);
  EXPECT_EQ(s.next_due_ms, 1500);
  EXPECT_EQ(s.oldest_ready_due_ms, 1000);  // b, due at the enqueue
}

TEST_F(Scripts, HandedBackJobsDoNotUseAnAttempt) {
  enqueue({qjob("a", 0, 1)}, 1000);
  for (int i = 0; i < 3; ++i) {
    auto l = lease(1, 5000);
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(l[0].attempt, 1u);
    Round round;
    round.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::handed_back, "draining", 0}}));
    EXPECT_EQ(calls::parse_nack(run(round))->at(0).status, NackStatus::retried);
  }
  EXPECT_EQ(field("a", "s"), "ready");
}

TEST_F(Scripts, AJobsOwnBackoffOverridesTheQueuesOne) {
  proto::NewJob own = qjob("own", 0, 5);
  own.backoff_base_ms = 10'000;
  own.backoff_cap_ms = 15'000;
  enqueue({own, qjob("queue", 0, 5)}, 1000);
  EXPECT_EQ(field("own", "bb"), "10000");
  EXPECT_EQ(field("queue", "bb"), "");  // 0 = the queue's
  for (int attempt = 1; attempt <= 3; ++attempt) {
    auto l = lease(2, 5000);
    ASSERT_EQ(l.size(), 2u);
    Round round;
    round.add(calls::nack("q", 2000, 100, 1000, 60,
               {{l[0].id, l[0].token, NackMode::retry, "x", 1.0}, {l[1].id, l[1].token, NackMode::retry, "x", 1.0}}));
    auto out = *calls::parse_nack(run(round));
    for (size_t i = 0; i < 2; ++i) {
      const bool is_own = l[i].id == "own";
      const int64_t expected = is_own ? std::min<int64_t>(15'000, 10'000LL << (attempt - 1))
                                      : std::min<int64_t>(1'000, 100LL << (attempt - 1));
      EXPECT_EQ(out[i].due_ms, 2000 + expected) << l[i].id << " attempt " << attempt;
    }
    Round promote;
    promote.add(calls::promote("q", 100'000, 10));
    run(promote);
  }
}

// A snooze (RESULTS outcome 4) puts the job back for its delay without an
// attempt or an error-log line; one past the queue's most is dead, a replay
// starts the count again, and a job that ends done leaves no count behind.
TEST_F(Scripts, ASnoozeUsesNoAttemptAndOnePastTheMostMakesTheJobDead) {
  enqueue({job("a", 0, 3), job("b", 0, 3)}, 1000);
  auto first = lease(2, 5000);
  const auto snooze = [](const LeasedJob& j, int64_t delay) {
    NackItem item{j.id, j.token, NackMode::snooze, "busy", 0, "w-1"};
    item.snooze_ms = delay;
    return item;
  };
  Round later;
  later.add(calls::nack("q", 2000, 1000, 5000, 60, {snooze(first[0], 5000), snooze(first[1], 0)}, false, 2));
  auto out = *calls::parse_nack(run(later));
  EXPECT_EQ(out[0].status, NackStatus::retried);
  EXPECT_EQ(out[0].due_ms, 7000);
  EXPECT_EQ(field("a", "s"), "scheduled");
  EXPECT_EQ(field("a", "r"), "7000");
  EXPECT_EQ(field("a", "a"), "0") << "no attempt used";
  EXPECT_EQ(field("a", "el"), "") << "nothing in the error log";
  EXPECT_EQ(field("b", "s"), "ready");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' snoozed"), "2");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' retried"), "");

  // b: leased again as attempt 1, snoozed to its most, then once more.
  for (int n = 2; n <= 3; ++n) {
    auto again = lease(1, 5000);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].id, "b");
    EXPECT_EQ(again[0].attempt, 1u) << "a snooze is not an attempt";
    Round round;
    round.add(calls::nack("q", 2000, 1000, 5000, 60, {snooze(again[0], 0)}, false, 2));
    EXPECT_EQ(calls::parse_nack(run(round))->at(0).status, n == 3 ? NackStatus::dead : NackStatus::retried) << n;
  }
  EXPECT_EQ(field("b", "s"), "dead");
  EXPECT_NE(field("b", "e").find("snoozed too often (2 times, the queue's max_snoozes): busy"), std::string::npos)
      << field("b", "e");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:snoozes' b"), "3") << "kept while it is dead";
  Round replay;
  replay.add(calls::replay("q", 3000, {"b"}));
  run(replay);
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:snoozes' b"), "0") << "a replay starts the count again";
  auto replayed = lease(1, 5000);
  ASSERT_EQ(replayed.size(), 1u);
  Round done;
  done.add(calls::ack("q", 3000, 60, {{"b", replayed[0].token}}));
  run(done);
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:snoozes'"), "1") << "only a's count is left";
  Round cancel;
  cancel.add(calls::cancel("q", 3000, "a", 60));
  run(cancel);
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:snoozes'"), "0") << "a cancelled job's count goes with it";
}

TEST_F(Scripts, ASnoozeWithABadDelayIsRefusedAndChangesNothing) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  for (int64_t delay : {int64_t{-1}, proto::JobResult::kMaxSnoozeMs + 1}) {
    NackItem item{"a", l[0].token, NackMode::snooze, "x", 0};
    item.snooze_ms = delay;
    Round round;
    round.add(calls::nack("q", 2000, 0, 0, 60, {item}, false, 5));
    EXPECT_NE(reply_error(run(round)).find("bad-args"), std::string_view::npos) << delay;
    EXPECT_EQ(field("a", "s"), "leased");
  }
}

// A job with a start-by deadline is stored as a version 4 record (with its
// key) that every script reads as it reads the others; an expired delivery
// goes dead unstarted, no attempt used, counted as expired.
TEST_F(Scripts, AnExpiredDeliveryGoesDeadWithoutAnAttemptAndIsCounted) {
  proto::NewJob late = job("a", 0, 3);
  late.start_by_ms = 9'000;
  late.key.data = "acct-1";
  proto::NewJob plain = job("b", 0, 3);
  plain.start_by_ms = 9'000;
  enqueue({late, plain}, 1000);
  auto leased = lease(2, 5000);
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_EQ(leased[0].record.start_by_ms, 9'000);
  EXPECT_EQ(leased[0].record.key, "acct-1");
  EXPECT_EQ(leased[1].record.key, "") << "version 4 keeps an empty key empty";
  EXPECT_EQ(field("a", "k"), "acct-1");
  Round expire;
  expire.add(calls::nack("q", 10'000, 0, 0, 60,
                         {{"a", leased[0].token, NackMode::expired, expired_reason(9'000), 0},
                          {"b", leased[1].token, NackMode::expired, expired_reason(9'000), 0}}));
  auto out = *calls::parse_nack(run(expire));
  EXPECT_EQ(out[0].status, NackStatus::dead);
  EXPECT_EQ(field("a", "s"), "dead");
  EXPECT_EQ(field("a", "e"), "expired: not started by 1970-01-01T00:00:09.000Z");
  EXPECT_EQ(field("a", "a"), "0") << "no attempt used";
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' expired"), "2");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' dead"), "2");
  // A replay sends it back as it was: its record still carries the deadline.
  Round replay;
  replay.add(calls::replay("q", 11'000, {"a"}));
  run(replay);
  auto again = lease(1, 15'000);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].record.start_by_ms, 9'000);
}
