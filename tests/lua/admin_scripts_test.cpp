// The scripts behind admin commands: cron ticks, cancel, replay and purge of
// dead letters.
// Run against a real redis-server through the broker's typed calls
// (docs/protocol.md's state diagram, rule by rule).
#include "broker/admin/job_search.hpp"
#include "broker/loop/queue_remover.hpp"
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;
using dueq::proto::StartCheck;

// A tick is enqueued once, however often its call is made; a state of
// another definition refuses the call and writes nothing.
TEST_F(Scripts, CronTickEnqueuesEachTickOnceAndRefusesAnotherDefinitionsState) {
  auto entry = make_cron_entry("beat", CronDefinition{"* * * * * *", "UTC", "q", "t", "p", "skip", 0});
  ASSERT_TRUE(entry);
  auto tick = [&](const CronEntry& e, const std::vector<int64_t>& ticks) {
    Round round;
    round.add(calls::cron_tick(e, ticks, 10'000, 3));
    auto outcome = calls::parse_cron_tick(run(round));
    EXPECT_TRUE(outcome);
    return outcome ? *outcome : calls::CronTickOutcome{};
  };
  EXPECT_EQ(tick(*entry, {9'000, 11'000, 12'000}).enqueued, 3) << "one due now, two ahead";
  EXPECT_EQ(tick(*entry, {11'000, 12'000}).enqueued, 0) << "sent again: nothing twice";
  EXPECT_EQ(tick(*entry, {12'000, 13'000}).enqueued, 1);
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1");
  EXPECT_EQ(field("beat@1970-01-01T00:00:13Z", "s"), "scheduled");
  auto changed = make_cron_entry("beat", CronDefinition{"*/2 * * * * *", "UTC", "q", "t", "p", "skip", 0});
  const auto refused = tick(*changed, {14'000});
  EXPECT_EQ(refused.enqueued, -1);
  EXPECT_EQ(refused.last_ms, 13'000);
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' accepted"), "4");
  Round bad;
  Command call = calls::cron_tick(*entry, {20'000, 19'000}, 10'000, 3);
  bad.add(std::move(call));
  EXPECT_NE(reply_error(run(bad)).find("bad-args"), std::string_view::npos) << "ticks out of order";
}

// A fresh state for a re-added entry frees the ids of its cancelled ticks
// within the lookahead (and only those), so its ticks there run again.
TEST_F(Scripts, CronRestartFreesTheCancelledTickIdsOfTheNewDefinition) {
  auto entry = make_cron_entry("beat", CronDefinition{"* * * * * *", "UTC", "q", "t", "p", "skip", 0});
  ASSERT_TRUE(entry);
  Round ticks;
  ticks.add(calls::cron_tick(*entry, {11'000, 12'000}, 10'000, 3));
  ASSERT_EQ(calls::parse_cron_tick(run(ticks))->enqueued, 2);
  Round cancel;
  cancel.add(calls::cancel("q", 10'500, "beat@1970-01-01T00:00:11Z", 60));
  ASSERT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  auto replaced = make_cron_entry("beat", CronDefinition{"* * * * * *", "UTC", "q", "t", "new", "skip", 0});
  Round restart;
  restart.add(calls::cron_restart(*replaced, 10'600, 60'000));
  EXPECT_EQ(reply::num(run(restart)), 1) << "the cancelled tick's id, and not the scheduled one's";
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:cron' beat"), "0:" + replaced->fingerprint());
  Round again;
  again.add(calls::cron_tick(*replaced, {11'000, 12'000}, 10'700, 3));
  EXPECT_EQ(calls::parse_cron_tick(run(again))->enqueued, 1) << "11 s runs with the new payload; 12 s is still known";
  Command bad = script_call(lua::ScriptId::cron_restart, {QueueKeys("q").cron, QueueKeys("q").cancelled});
  bad.add("beat").add(replaced->fingerprint()).add("other@1970-01-01T00:00:13Z");
  Round refused;
  refused.add(std::move(bad));
  EXPECT_NE(reply_error(run(refused)).find("bad-args"), std::string_view::npos) << "another entry's tick";
}

TEST_F(Scripts, CancelEndsScheduledAndReadyJobsAtOnce) {
  enqueue({qjob("s", 5000), qjob("r")}, 1000);
  for (const char* id : {"s", "r"}) {
    Round round;
    round.add(calls::cancel("q", 2000, id, 60));
    EXPECT_EQ(calls::parse_cancel(run(round))->status, CancelStatus::cancelled) << id;
    EXPECT_EQ(field(id, "s"), "cancelled");
  }
  EXPECT_EQ(redis_->cli("EXISTS " + partition_of("s") + " " + partition_jobs_of("s")), "0");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:schedule'"), "0");  // an emptied partition leaves the index
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "0");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "0");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' cancelled"), "2");
  Round again;
  again.add(calls::cancel("q", 2000, "s", 60));
  EXPECT_EQ(calls::parse_cancel(run(again))->status, CancelStatus::already_finished);  // already finished
  Round missing;
  missing.add(calls::cancel("q", 2000, "nope", 60));
  EXPECT_EQ(calls::parse_cancel(run(missing))->status, CancelStatus::not_found);
}

TEST_F(Scripts, CancellingALeasedJobEndsItCancelledWhenItsDeliveryEnds) {
  enqueue({qjob("a", 0, 5), qjob("b", 0, 5)}, 1000);
  auto l = lease(2, 5000);
  for (const char* id : {"a", "b"}) {
    Round round;
    round.add(calls::cancel("q", 2000, id, 60));
    auto c = *calls::parse_cancel(run(round));
    EXPECT_EQ(c.status, CancelStatus::cancel_requested);
    EXPECT_GT(c.token, 0u);
  }
  // a: its worker reports a failure; the cancel mark wins over a retry.
  Round nack;
  nack.add(calls::nack("q", 2100, 0, 0, 60, {{"a", l[0].token, NackMode::retry, "killed", 0}}));
  EXPECT_EQ(calls::parse_nack(run(nack))->at(0).status, NackStatus::cancelled);
  EXPECT_EQ(field("a", "s"), "cancelled");
  // b: its worker vanished; the lease expires and the job ends cancelled.
  Round reclaim;
  reclaim.add(calls::reclaim("q", 6000, 10, 60));
  run(reclaim);
  EXPECT_EQ(field("b", "s"), "cancelled");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' cancelled"), "2");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "0");
}

TEST_F(Scripts, ReplayPutsDeadJobsBackWithAttemptsResetAndTheSameId) {
  enqueue({qjob("a", 0, 1), qjob("b", 0, 1)}, 1000);
  auto l = lease(2, 5000);
  Round kill;
  kill.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::dead, "bad", 0}, {"b", l[1].token, NackMode::dead, "bad", 0}}));
  run(kill);
  Round replay;
  replay.add(calls::replay("q", 3000, {"a", "not-dead"}));
  EXPECT_EQ(*strs(run(replay)), std::vector<std::string>{"a"});
  EXPECT_EQ(field("a", "s"), "ready");
  EXPECT_EQ(field("a", "a"), "0");
  Round all;
  all.add(calls::replay_oldest("q", 3000, 1000));
  EXPECT_EQ(*strs(run(all)), std::vector<std::string>{"b"});
  auto again = lease(2, 9000);
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].attempt, 1u);
}

TEST_F(Scripts, PurgeDeletesDeadJobsByIdOrAgeAndCountsThem) {
  enqueue({qjob("old", 0, 1), qjob("new", 0, 1)}, 1000);
  std::map<std::string, uint64_t> token;
  for (const auto& j : lease(2, 5000)) token[j.id] = j.token;
  Round kill_old;
  kill_old.add(calls::nack("q", 2000, 0, 0, 60, {{"old", token["old"], NackMode::dead, "x", 0}}));
  run(kill_old);
  Round kill_new;
  kill_new.add(calls::nack("q", 9000, 0, 0, 60, {{"new", token["new"], NackMode::dead, "x", 0}}));
  run(kill_new);
  Round by_age;
  by_age.add(calls::purge_dead_before("q", 5000, 100));
  EXPECT_EQ(*strs(run(by_age)), std::vector<std::string>{"old"});
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' old"), "0");
  Round by_id;
  by_id.add(calls::purge("q", {"new"}));
  EXPECT_EQ(*strs(run(by_id)), std::vector<std::string>{"new"});
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' purged"), "2");
}

// delete_queue: an empty queue's keys and name go together; a queue with a
// job in any unfinished state or dead refuses with the counts, writes
// nothing; a call with the wrong keys or arguments writes nothing.
TEST_F(Scripts, DeleteQueueRemovesOnlyAnEmptyQueueAndItsNameAtOnce) {
  redis_->cli("SADD dueq:{leader}:queues q");
  enqueue({qjob("s", 5000), qjob("r")}, 1000);
  Round refused;
  refused.add(calls::delete_queue("q"));
  auto outcome = calls::parse_delete_queue(run(refused));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->status, DeleteQueueStatus::not_empty);
  EXPECT_EQ(std::make_tuple(outcome->scheduled, outcome->ready, outcome->running, outcome->dead), std::make_tuple(1, 1, 0, 0));
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues q"), "1");
  EXPECT_EQ(field("s", "s"), "scheduled");

  Command bad{"EVAL", lua::script(lua::ScriptId::delete_queue).source, "4", "a", "b", QueueKeys("q").epoch, kLeaderEpochsKey, "q", "1"};
  Round wrong;
  wrong.add(std::move(bad));
  EXPECT_NE(std::string(reply_error(run(wrong))).find("bad-args"), std::string::npos);

  for (const char* id : {"s", "r"}) {
    Round cancel;
    cancel.add(calls::cancel("q", 2000, id, 60));
    run(cancel);
  }
  // A key name a script derives from one it was given goes too.
  redis_->cli("ZADD 'dueq:{q}:keys:parked:per_key' 1 left-over");
  Round deleted;
  deleted.add(calls::delete_queue("q"));
  EXPECT_EQ(calls::parse_delete_queue(run(deleted))->status, DeleteQueueStatus::deleted);
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues q"), "0");
  EXPECT_EQ(redis_->cli("KEYS 'dueq:{q}:*'"), "dueq:{q}:epoch");
}

// reschedule.lua (`dueq bulk run_now`, `reschedule`): scheduled and ready
// jobs move to their new due time, to ready when it has come; leased,
// finished and unknown jobs, and a ready job asked to run now, are left
// alone; the schedule's count follows.
TEST_F(Scripts, RescheduleMovesWaitingJobsAndLeavesTheRestAlone) {
  enqueue({job("later", 90'000), job("sooner", 90'000), job("now"), job("held")}, 1000);
  auto held = lease(1, 9000);  // "now" or "held", whichever lease takes first
  ASSERT_EQ(held.size(), 1u);
  const std::string ready_one = held[0].id == "now" ? "held" : "now";
  Round later;
  later.add(calls::reschedule("q", 2000, 120'000, {"later", ready_one}));
  EXPECT_EQ(*ints(run(later)), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(field("later", "s"), "scheduled");
  EXPECT_EQ(field("later", "r"), "120000");
  EXPECT_EQ(field("later", "d"), "90000");  // its first due time stays in its document
  EXPECT_EQ(field(ready_one, "s"), "scheduled");
  EXPECT_EQ(field(ready_one, "t"), "t");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "3");
  Round now;
  now.add(calls::reschedule("q", 2000, 2000, {"sooner", held[0].id, "nobody"}));
  EXPECT_EQ(*ints(run(now)), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(field("sooner", "s"), "ready");
  EXPECT_EQ(field("sooner", "p"), "payload-x");
  EXPECT_EQ(field(held[0].id, "s"), "leased");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "2");
  Round again;  // a ready job asked to run now: nothing to do
  again.add(calls::reschedule("q", 2000, 1500, {"sooner"}));
  EXPECT_EQ(*ints(run(again)), std::vector<int64_t>{0});
  // The ones sent back to ready are leased like any other.
  const auto leased = lease(5, 9000);
  ASSERT_EQ(leased.size(), 1u);
  EXPECT_EQ(leased[0].id, "sooner");
  // And promote finds the rescheduled ones at their new time only.
  Round early;
  early.add(calls::promote("q", 119'999, 100));
  run(early);
  EXPECT_EQ(field("later", "s"), "scheduled");
  Round due;
  due.add(calls::promote("q", 120'000, 100));
  run(due);
  EXPECT_EQ(field("later", "s"), "ready");
  EXPECT_EQ(field(ready_one, "s"), "ready");
  // Bad arguments change nothing.
  for (auto bad : {calls::reschedule("q", 2000, -1, {"later"}), calls::reschedule("q", 2000, 5000, {})}) {
    Round refused;
    refused.add(std::move(bad));
    EXPECT_NE(reply_error(run(refused)).find("bad-args reschedule"), std::string_view::npos);
  }
}

// A spread gives each job its own due time in [due, due + spread), drawn
// from its id: the same on every call, so a page applied again moves and
// counts nothing.
TEST_F(Scripts, RescheduleSpreadsDueTimesByIdAndARepeatMovesNothing) {
  std::vector<proto::NewJob> jobs;
  std::vector<std::string> ids;
  for (int i = 0; i < 50; ++i) {
    ids.push_back("spread-" + std::to_string(i));
    jobs.push_back(job(ids.back(), 90'000));
  }
  enqueue(jobs, 1000);
  Round moved;
  moved.add(calls::reschedule("q", 2000, 100'000, ids, 10'000));
  EXPECT_EQ(*ints(run(moved)), std::vector<int64_t>(50, 1));
  std::set<std::string> dues;
  for (const auto& id : ids) {
    const int64_t run_at = std::stoll(field(id, "r"));
    EXPECT_GE(run_at, 100'000) << id;
    EXPECT_LT(run_at, 110'000) << id;
    dues.insert(field(id, "r"));
  }
  EXPECT_GT(dues.size(), 40u) << "the due times are spread, not herded";
  Round again;
  again.add(calls::reschedule("q", 2000, 100'000, ids, 10'000));
  EXPECT_EQ(*ints(run(again)), std::vector<int64_t>(50, 0));
}

// lua/search.lua: a step looks at a bounded number of jobs, the filters are
// applied in Redis, every job of a state is found once over the steps of a
// static store, and bad arguments are refused.
TEST_F(Scripts, SearchStepsAreBoundedAndTogetherFindEveryMatchingJobOnce) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 2'000; ++i) {
    auto j = job(fmt::format("s-{:04}", i), 100'000 + i);
    if (i % 7 == 0) j.type = "needle";
    jobs.push_back(std::move(j));
  }
  enqueue_in_batches(jobs, 1000);
  size_t steps = 0, examined = 0;
  SearchFilter every;
  EXPECT_EQ(search_all("scheduled", every, steps, examined).size(), 2'000U);
  EXPECT_GE(steps, 2'000 / (kSearchStep + 100));  // each step looks at kSearchStep, and a little more
  SearchFilter needles;
  needles.type = "needle";
  const auto found = search_all("scheduled", needles, steps, examined);
  EXPECT_EQ(found.size(), 286U);  // i % 7 == 0 for i < 2000
  EXPECT_EQ(found.count("s-0007"), 1U);
  EXPECT_EQ(found.count("s-0001"), 0U);
  SearchFilter window;
  window.id_prefix = "s-00";
  window.since_ms = 100'050;
  EXPECT_EQ(search_all("scheduled", window, steps, examined).size(), 50U);  // s-0050 .. s-0099
  EXPECT_TRUE(search_all("ready", every, steps, examined).empty());

  for (const auto& args : std::vector<std::vector<std::string>>{{"bogus", "0", "10", "", "", "", "0", "1"},
                                                                {"live", "x", "10", "", "", "", "0", "1"},
                                                                {"live", "0", "0", "", "", "", "0", "1"},
                                                                {"live", "0", "1001", "", "", "", "0", "1"},
                                                                {"live", "0", "10", "", "", "", "soon", "1"},
                                                                {"live", "0", "10", "", "", ""}}) {
    Command bad = script_call(lua::ScriptId::search, {"dueq:{q}:ready", "dueq:{q}:jobs", "dueq:{q}:errors"});
    for (const auto& a : args) bad.add(a);
    Round refused;
    refused.add(std::move(bad));
    EXPECT_NE(reply_error(run(refused)).find("bad-args search"), std::string_view::npos) << fmt::format("{}", fmt::join(args, " "));
  }
}

proto::NewJob typed(std::string id, int64_t due, std::string type) {
  auto j = job(std::move(id), due, 5);
  j.type = std::move(type);
  return j;
}

// A prefix is matched byte for byte, though the scheduled state is read
// with ZSCAN's MATCH (a glob): the glob's own characters and bytes that are
// not UTF-8 in it match only themselves, and the other filters still apply.
TEST_F(Scripts, ASearchByIdPrefixMatchesGlobCharactersAndAnyBytesLiterally) {
  const std::vector<std::string> ids = {"a*b", "a*c", "axb", "a?b", "a[b]", "ab]", "a\\b", "a\\", "ab", "\xff\xfe-1", "\xff-2"};
  std::vector<proto::NewJob> jobs;
  for (const auto& id : ids) jobs.push_back(typed(id, 100'000, id == "a*c" ? "needle" : "hay"));
  enqueue_in_batches(jobs, 1000);
  auto by_prefix = [&](const std::string& prefix, const std::string& type = "") {
    SearchFilter f;
    f.id_prefix = prefix;
    f.type = type;
    size_t steps = 0, examined = 0;
    const auto found = search_all("scheduled", f, steps, examined);
    if (type.empty()) {
      EXPECT_EQ(examined, ids.size()) << "every scheduled job is looked at once";
    }
    return std::set<std::string>(found.begin(), found.end());
  };
  EXPECT_EQ(by_prefix("a*"), (std::set<std::string>{"a*b", "a*c"}));
  EXPECT_EQ(by_prefix("a?"), (std::set<std::string>{"a?b"}));
  EXPECT_EQ(by_prefix("a["), (std::set<std::string>{"a[b]"}));
  EXPECT_EQ(by_prefix("a[b"), (std::set<std::string>{"a[b]"}));
  EXPECT_EQ(by_prefix("ab]"), (std::set<std::string>{"ab]"}));
  EXPECT_EQ(by_prefix("a\\"), (std::set<std::string>{"a\\b", "a\\"}));
  EXPECT_EQ(by_prefix("\xff\xfe"), (std::set<std::string>{"\xff\xfe-1"}));
  EXPECT_EQ(by_prefix("\xff"), (std::set<std::string>{"\xff\xfe-1", "\xff-2"}));
  EXPECT_EQ(by_prefix("a"), (std::set<std::string>{"a*b", "a*c", "axb", "a?b", "a[b]", "ab]", "a\\b", "a\\", "ab"}));
  EXPECT_EQ(by_prefix("a*", "needle"), (std::set<std::string>{"a*c"}));
  EXPECT_TRUE(by_prefix("b").empty());
}

// The type index (lua/lib/schedule_filter.lua): a search of scheduled jobs
// by an indexed type reads only the partitions that may hold it, whichever
// script put the jobs there, and a partition promote empties loses its bits.
TEST_F(Scripts, ASearchByTypeReadsOnlyThePartitionsTheTypeIndexNames) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 2'000; ++i) jobs.push_back(typed(fmt::format("s-{:04}", i), 100'000 + i, i % 200 == 0 ? "needle" : "hay"));
  enqueue_in_batches(jobs, 1000);
  // One needle retried with a backoff (nack.lua), one moved from ready
  // (reschedule.lua).
  enqueue({typed("retried", 0, "needle")}, 1000);
  auto l = lease(1, 5000);
  ASSERT_EQ(l.size(), 1U);
  Round nack;
  nack.add(calls::nack("q", 2000, 50'000, 50'000, 60, {{"retried", l[0].token, NackMode::retry, "again", 1.0}}));
  ASSERT_EQ(calls::parse_nack(run(nack))->at(0).status, NackStatus::retried);
  enqueue({typed("moved", 0, "needle")}, 1000);
  Round moved;
  moved.add(calls::reschedule("q", 3000, 99'000, {"moved"}));
  ASSERT_EQ(*ints(run(moved)), std::vector<int64_t>{1});

  size_t steps = 0, examined = 0;
  SearchFilter needles;
  needles.type = "needle";
  const auto found = search_all("scheduled", needles, steps, examined);
  EXPECT_EQ(found.size(), 12U);
  EXPECT_EQ(found.count("retried") + found.count("moved") + found.count("s-0200"), 3U);
  // 2,002 jobs in 32,768 partitions: a partition the index names holds the
  // needle and seldom another job; without the index all 2,002 are read.
  EXPECT_LE(examined, 24U);
  EXPECT_NE(redis_->cli("SMEMBERS 'dueq:{q}:schedule:types'").find("needle"), std::string::npos);

  // Promote takes the needles due by 100,000 (retried, moved, s-0000) out
  // of partitions that hold no other job (the ids are fixed, and so are
  // their partitions): their bits go.
  const auto before = std::stoll(redis_->cli("BITCOUNT 'dueq:{q}:schedule:type:needle'"));
  Round promote;
  promote.add(calls::promote("q", 100'000, 100));
  run(promote);
  EXPECT_EQ(std::stoll(redis_->cli("BITCOUNT 'dueq:{q}:schedule:type:needle'")), before - 3);
  // The schedule emptied: the index goes with it.
  Round all;
  all.add(calls::promote("q", 200'000, 5'000));
  run(all);
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "0");
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:schedule:types' 'dueq:{q}:schedule:typed' 'dueq:{q}:schedule:type:needle' "
                        "'dueq:{q}:schedule:type:hay'"),
            "0");
}

// A type is indexed only while the index is complete (the put that found
// the schedule empty began it) and while fewer than 16 are: any other is
// found by reading every partition, and found all the same.
TEST_F(Scripts, ASearchByATypeTheIndexDoesNotHoldReadsEveryPartition) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 20; ++i) {
    jobs.push_back(typed(fmt::format("k-{:02}", i), 100'000, fmt::format("kind-{:02}", i)));
    if (i == 15 || i == 19) enqueue(std::exchange(jobs, {}), 1000);  // the first 16 types in one call
  }
  EXPECT_EQ(redis_->cli("SCARD 'dueq:{q}:schedule:types'"), "16");
  size_t steps = 0, indexed = 0, unindexed = 0;
  SearchFilter first, last;
  first.type = "kind-00";
  last.type = "kind-19";
  EXPECT_EQ(search_all("scheduled", first, steps, indexed).count("k-00"), 1U);
  EXPECT_EQ(search_all("scheduled", last, steps, unindexed).count("k-19"), 1U);
  EXPECT_EQ(indexed, 1U);
  EXPECT_EQ(unindexed, 20U);

  // A store whose schedule was filled before the index existed: no marker,
  // so a new type is not indexed while old jobs of it may be unindexed.
  ASSERT_EQ(redis_->cli("DEL 'dueq:{q}:schedule:typed' 'dueq:{q}:schedule:types'"), "2");
  enqueue({typed("late", 100'000, "kind-00"), typed("new", 100'000, "fresh")}, 1000);
  EXPECT_EQ(redis_->cli("SCARD 'dueq:{q}:schedule:types'"), "0");
  size_t scanned = 0;
  EXPECT_EQ(search_all("scheduled", first, steps, scanned).size(), 2U);
  EXPECT_EQ(scanned, 22U);
}

// Rule: a queue whose delete call got no answer (its round failed: the
// connection went, as at a fail-over) is unregistered, which the scheduler
// skips, and counted written, so that the next write registers it again;
// the remover asks nothing more. What the store still registers goes on
// through the broker's reconnect, which a failed round always leads to and
// which reads the registry again
// (QueueDelete.AQueueTheStoreHoldsAgainAfterAReconnectRunsItsJobs).
TEST_F(Scripts, AQueueWhoseDeleteWentUnansweredIsUnregisteredAndWrittenAgainByItsNextWrite) {
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  Outbox outbox(router);
  QueueTable queues;
  WorkerRegistry workers;
  QueueRemover remover(queues, workers, [](const std::string&) { return std::string(); }, outbox);
  QueueState& q = queues.get("unsure");
  q.registered = q.written = true;
  remover.on_request(Peer{"operator"}, 1, "unsure");
  Round unanswered;
  remover.add_to(unanswered);
  ASSERT_EQ(unanswered.calls(), 1U);
  unanswered.fail();
  const QueueState* after = queues.find("unsure");
  ASSERT_NE(after, nullptr) << "not forgotten: it may still hold jobs";
  EXPECT_FALSE(after->registered);
  EXPECT_TRUE(after->written) << "its next write registers it again";
  EXPECT_FALSE(after->deleting);
  EXPECT_FALSE(remover.has_work());
}
