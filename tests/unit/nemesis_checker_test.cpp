// The nemesis checker and schedule without a run: each rule fails the
// history that breaks it and passes the one that keeps it; the schedule is
// the same for the same seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/nemesis/checker.hpp"
#include "tests/nemesis/flow_groups.hpp"
#include "tests/nemesis/unique_holds.hpp"
#include "tests/nemesis/schedule.hpp"
#include "tests/support/redis_server.hpp"

namespace dueq::nemesis {
namespace {

constexpr int64_t kDue = 1'800'000'000'000;  // ms

// One noop job due at kDue, started once a second later, done: every fact
// in agreement.
History healthy() {
  History h;
  h.accepted.push_back({"j1", "noop", kDue, 3, true, kDue - 5});
  h.starts.push_back({"j1", 1, 11, (kDue + 1'000) * 1000, "w0"});
  h.finals["j1"] = {"done", kDue + 1'010, "", "noop", 1};
  h.facts = {{"healed_ms", kDue}, {"settled_ms", kDue + 2'000}, {"audit", 0}, {"stats_done", 1}, {"stats_dead", 0},
             {"stats_cancelled", 0}, {"stats_accepted", 1}, {"stats_in_flight", 0}};
  return h;
}

// healthy(), but the job ended `state` (its stats counter agreeing).
History ended(const std::string& state, const std::string& error = "") {
  History h = healthy();
  h.finals["j1"] = {state, 0, error};
  h.facts["stats_done"] = 0;
  h.facts["stats_" + state] = 1;
  return h;
}

bool says(const Verdict& v, const std::string& needle) {
  return std::any_of(v.violations.begin(), v.violations.end(), [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}

TEST(NemesisChecker, AHealthyHistoryPasses) {
  const Verdict v = check(healthy(), Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
  EXPECT_EQ(v.done, 1U);
  EXPECT_EQ(v.accepted, 1U);
}

// A rescheduled job may start from the earlier of its two due times and
// is late only past the later one; a job nobody moved is held to its own.
TEST(NemesisChecker, ARescheduledJobIsHeldToTheEarlierDueForEarlyAndTheLaterForLate) {
  History h = healthy();  // j1 due kDue, started 1 s after it
  h.starts[0].start_us = (kDue - 2'000) * 1000;
  h.finals["j1"].finished_ms = kDue - 1'990;
  EXPECT_TRUE(says(check(h, Bounds{}), "j1: EARLY"));
  h.reschedules["j1"] = kDue - 2'500;  // moved 2.5 s earlier: the start is on time
  Verdict v = check(h, Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
  EXPECT_EQ(v.rescheduled, 1U);
  h = healthy();
  h.starts[0].start_us = (kDue + 9'000) * 1000;
  h.finals["j1"].finished_ms = kDue + 9'010;
  EXPECT_TRUE(says(check(h, Bounds{}), "j1: LATE"));
  h.reschedules["j1"] = kDue + 8'000;  // moved 8 s later: 1 s after its new time
  v = check(h, Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
}

// A done job's kept document must be its own: its type, and the attempt
// of one of its starts; a run whose done jobs kept none fails.
TEST(NemesisChecker, AKeptDocumentMustBeTheJobsOwn) {
  History h = healthy();
  h.finals["j1"].type = "sleep";
  EXPECT_TRUE(says(check(h, Bounds{}), "j1: its kept document names type 'sleep', not 'noop'"));
  h = healthy();
  h.finals["j1"].attempt = 2;
  EXPECT_TRUE(says(check(h, Bounds{}), "j1: its kept document says attempt 2"));
  h = healthy();
  h.finals["j1"].type = "";
  const Verdict v = check(h, Bounds{});
  EXPECT_TRUE(says(v, "run: no done job kept its document")) << v.report();
  EXPECT_EQ(check(healthy(), Bounds{}).documents_kept, 1U);
}

// A periodic tick never enqueued is missed; a fault near the lookahead
// before it (a take-over after it fell due skips it) explains it, a worker's
// poison job or a fault long before does not.
TEST(NemesisChecker, APeriodicTickMissedNeedsAFaultNearItsLookahead) {
  History h = healthy();
  h.ticks = {{"tick@1", kDue - 20'000, true}, {"tick@2", kDue - 18'000, false}};
  Verdict v = check(h, Bounds{});
  EXPECT_TRUE(says(v, "tick@2: MISSED")) << v.report();
  EXPECT_EQ(v.ticks_found, 1U);
  h.faults = {{kDue - 60'000, kDue - 50'000, "kill", "broker0", 0}, {kDue - 19'000, kDue - 18'500, "poison", "worker0", 0}};
  EXPECT_TRUE(says(check(h, Bounds{}), "tick@2: MISSED")) << "long before, or a worker's poison job";
  h.faults.push_back({kDue - 30'000, kDue - 25'000, "partition", "broker0 <-/-> host", 0});
  v = check(h, Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
  EXPECT_EQ(v.ticks_missed_by_cause["partition"], 1U);
}

TEST(NemesisChecker, AnAcceptedJobTheBrokerDoesNotKnowIsLost) {
  History h = healthy();
  h.finals.clear();
  h.facts["stats_done"] = 0;
  h.facts["stats_accepted"] = 0;
  EXPECT_TRUE(says(check(h, Bounds{}), "LOST"));
  // Of unknown outcome, its absence is allowed.
  h.accepted[0].surely = false;
  EXPECT_TRUE(check(h, Bounds{}).violations.empty());
}

// A deleted queue takes its done ids along: a job of it that started is
// done; one that never started is lost all the same, and so is one of a
// queue no delete removed.
TEST(NemesisChecker, AJobGoneWithItsDeletedQueueMustHaveStarted) {
  History h = healthy();
  h.accepted[0].queue = "t";
  h.finals.clear();
  h.facts["stats_done"] = 0;
  h.facts["stats_accepted"] = 0;
  EXPECT_TRUE(says(check(h, Bounds{}), "LOST")) << "no delete landed";
  h.deleted_queues.insert("t");
  const Verdict gone = check(h, Bounds{});
  EXPECT_TRUE(gone.violations.empty()) << gone.report();
  EXPECT_EQ(gone.gone_with_queue, 1U);
  h.starts.clear();
  EXPECT_TRUE(says(check(h, Bounds{}), "LOST")) << "it never ran";
}

// A producer that asks again for a job its first try did not hear accepted,
// after a delete of the job's queue took the id along, makes a new job of
// it: that start again is explained only when the delete may have landed
// after the first start and the ask came after the delete began.
TEST(NemesisChecker, AStartAgainAfterADeleteOfItsQueueNeedsTheProducerToHaveAskedAgainAfterIt) {
  History h = healthy();
  h.accepted[0].queue = "t";
  h.starts.push_back({"j1", 1, 12, (kDue + 3'000) * 1000, "w1"});
  h.facts["stats_done"] = 1;
  h.deleted_queues.insert("t");
  h.deletes.push_back({"t", kDue + 1'500, kDue + 1'600});
  EXPECT_TRUE(says(check(h, Bounds{}), "no fault to explain it")) << "nobody asked again";
  h.asks["j1"] = {kDue + 1'400};
  EXPECT_TRUE(says(check(h, Bounds{}), "no fault to explain it")) << "asked before the delete began";
  h.asks["j1"] = {kDue + 2'000};
  const Verdict asked = check(h, Bounds{});
  EXPECT_TRUE(asked.violations.empty()) << asked.report();
  EXPECT_EQ(asked.duplicates_by_cause.at(kAskedAgainAfterDelete), 1U);
  h.deletes[0] = {"t", kDue + 500, kDue + 600};
  h.asks["j1"] = {kDue + 700};
  EXPECT_TRUE(says(check(h, Bounds{}), "no fault to explain it")) << "the delete ended before the first start";
  h.deletes[0] = {"other", kDue + 1'500, kDue + 1'600};
  h.asks["j1"] = {kDue + 2'000};
  EXPECT_TRUE(says(check(h, Bounds{}), "no fault to explain it")) << "another queue was deleted";
}

// A search by type that did not find a waiting job no operator touched is a
// violation, but when its answer came after the due time or while a
// broker's clock ran ahead by the time left; a fault on the store excuses
// none.
TEST(NemesisChecker, AWaitingJobASearchByItsTypeDidNotFindIsAViolation) {
  History h = healthy();
  h.searches.push_back({"j1", kDue - 4'000, true});
  const Verdict found = check(h, Bounds{});
  EXPECT_TRUE(found.violations.empty()) << found.report();
  EXPECT_EQ(found.searches, 1U);
  h.searches[0].found = false;
  h.searches[0].answered_ms = kDue - 3'900;
  EXPECT_TRUE(says(check(h, Bounds{}), "MISSED BY SEARCH"));
  h.searches[0].answered_ms = kDue + 1;
  EXPECT_TRUE(check(h, Bounds{}).violations.empty()) << "answered after the due time: it may have run after the promotion";
  h.searches[0].answered_ms = kDue - 1;
  EXPECT_TRUE(says(check(h, Bounds{}), "MISSED BY SEARCH")) << "answered before the due time";
  h.searches[0].answered_ms = kDue - 3'900;
  h.faults.push_back({kDue - 5'000, kDue - 3'000, "clock", "broker0", 3'000});
  EXPECT_TRUE(says(check(h, Bounds{}), "MISSED BY SEARCH")) << "a step of 3 s does not reach a job 4 s ahead";
  h.faults[0].shift_ms = 5'000;
  EXPECT_TRUE(check(h, Bounds{}).violations.empty());
  // The admin thread reads only from the master the loop writes to: a move
  // of the master during the search excuses nothing.
  h.faults[0] = {kDue - 5'000, kDue - 4'500, "move", "move the master and its address to redis1", 0};
  EXPECT_TRUE(says(check(h, Bounds{}), "MISSED BY SEARCH")) << "a move excuses nothing";
  h.searches[0].id = "nobody";
  EXPECT_TRUE(says(check(h, Bounds{}), "never accepted"));
}

// A wait for an echo job is answered done with its id as the result after
// a start, dead or cancelled as the job ended, and never unknown for a job
// the broker shows at the end.
TEST(NemesisChecker, AWaitsAnswerMustBeTheJobsEnd) {
  History h = healthy();
  h.waits.push_back({"j1", kDue - 10, kDue + 1'020, "done", "j1", ""});
  const Verdict right = check(h, Bounds{});
  EXPECT_TRUE(right.violations.empty()) << right.report();
  EXPECT_EQ(right.waits_by_state.at("done"), 1u);
  h.waits[0].result = "other";
  EXPECT_TRUE(says(check(h, Bounds{}), "not its payload"));
  h.waits[0].result = "j1";
  h.waits[0].answered_ms = kDue + 999;
  EXPECT_TRUE(says(check(h, Bounds{}), "before any start"));
  h.waits[0] = {"j1", kDue - 10, kDue + 1'020, "dead", "", "x"};
  EXPECT_TRUE(says(check(h, Bounds{}), "answered dead, but the job is done"));
  h.waits[0].state = "unknown";
  EXPECT_TRUE(says(check(h, Bounds{}), "answered unknown"));
  h.waits[0].state = "pending";
  EXPECT_TRUE(check(h, Bounds{}).violations.empty());
  History died = ended("dead", "boom");
  died.waits.push_back({"j1", kDue - 10, kDue + 1'020, "dead", "", "boom"});
  EXPECT_FALSE(says(check(died, Bounds{}), "WAIT")) << check(died, Bounds{}).report();
  died.waits[0].state = "done";
  died.waits[0].result = "j1";
  EXPECT_TRUE(says(check(died, Bounds{}), "answered done, but the job ended dead"));
  h.waits[0].id = "never-accepted";
  h.waits[0].state = "unknown";
  EXPECT_TRUE(check(h, Bounds{}).violations.empty()) << "a job not surely accepted may be unknown";
}

// A running job's progress, as `dueq workers` showed it, is its own
// handler's: its text names the job, its percent is 0..100, and the job
// was started.
TEST(NemesisChecker, AJobsProgressMustBeItsOwn) {
  History h = healthy();
  h.progress.push_back({"j1", "j1", 40});
  const Verdict right = check(h, Bounds{});
  EXPECT_TRUE(right.violations.empty()) << right.report();
  EXPECT_EQ(right.progress_samples, 1u);
  h.progress[0].named = "j2";
  EXPECT_TRUE(says(check(h, Bounds{}), "with the progress of job j2"));
  h.progress[0] = {"j1", "j1", 101};
  EXPECT_TRUE(says(check(h, Bounds{}), "shown at 101%"));
  h.progress[0] = {"j9", "j9", 5};
  EXPECT_TRUE(says(check(h, Bounds{}), "no worker recorded starting"));
}

TEST(NemesisChecker, AStartBeforeTheDueTimeIsEarly) {
  History h = healthy();
  h.starts[0].start_us = kDue * 1000 - 1;
  EXPECT_TRUE(says(check(h, Bounds{}), "EARLY"));
}

TEST(NemesisChecker, AStartAgainIsChargedToTheFaultBetweenTheTwoOrIsAViolation) {
  History h = healthy();
  h.starts.push_back({"j1", 1, 12, (kDue + 5'000) * 1000, "w1"});
  const Verdict alone = check(h, Bounds{});
  EXPECT_TRUE(says(alone, "no fault to explain it")) << alone.report();
  h.faults.push_back({kDue + 2'000, kDue + 3'000, "partition", "worker0 <-/-> host"});
  const Verdict blamed = check(h, Bounds{});
  EXPECT_TRUE(blamed.violations.empty()) << blamed.report();
  EXPECT_EQ(blamed.duplicates_by_cause.at("partition"), 1U);
  EXPECT_EQ(blamed.longest_rerun_gap_ms, 4'000);
  // A fault that healed long before the first start explains nothing.
  h.faults[0] = {kDue - 60'000, kDue - 50'000, "kill", "worker0"};
  EXPECT_TRUE(says(check(h, Bounds{}), "no fault to explain it"));
}

// A broker's clock stepped forward runs jobs early by up to the step (as
// documented); it explains no early start beyond it and no start again.
// A first start late by more than late_ms of time no fault excuses is a
// stall; a fault's span and recover_ms after it excuse it, and a kind the
// system is to carry on through excuses only recover_ms from its start.
TEST(NemesisChecker, AJobStartedLateNeedsAFaultToExcuseIt) {
  History h = healthy();
  h.starts[0].start_us = (kDue + 9'000) * 1000;
  h.finals["j1"].finished_ms = kDue + 9'010;
  Bounds bounds;
  bounds.late_ms = 5'000;
  bounds.recover_ms = 2'000;
  Verdict v = check(h, bounds);
  EXPECT_TRUE(says(v, "j1: LATE: first started 9000 ms after it was due, 9000 ms")) << v.report();
  EXPECT_EQ(v.longest_unexcused_late_ms, 9'000);
  h.faults = {{kDue + 1'000, kDue + 4'000, "kill", "broker0", 0}};  // excuses 1 s to 6 s: 4 s left
  v = check(h, bounds);
  EXPECT_TRUE(v.violations.empty()) << v.report();
  EXPECT_EQ(v.longest_unexcused_late_ms, 4'000);
  bounds.explains_no_delay = {"kill"};  // excuses 1 s to 3 s: 7 s left
  v = check(h, bounds);
  EXPECT_TRUE(says(v, "j1: LATE: first started 9000 ms after it was due, 7000 ms")) << v.report();
  h.accepted[0].answered_ms = kDue + 5'000;  // accepted after it was due: late from then, 4 s
  h.faults.clear();
  EXPECT_TRUE(check(h, bounds).violations.empty());
}

TEST(NemesisChecker, ANamedScheduleBarsItsFaultKindsFromExplainingAStartAgain) {
  History h = healthy();
  h.starts.push_back({"j1", 1, 12, (kDue + 5'000) * 1000, "w1"});
  h.faults.push_back({kDue + 2'000, kDue + 3'000, "pause", "pause broker0"});
  EXPECT_TRUE(check(h, bounds_for("")).violations.empty());
  const Verdict strict = check(h, bounds_for("paused-leader"));
  EXPECT_TRUE(says(strict, "no fault to explain it")) << strict.report();
  // Another kind in its window still explains it.
  h.faults.push_back({kDue + 2'500, kDue + 2'600, "poison", "worker0 exited"});
  EXPECT_TRUE(check(h, bounds_for("paused-leader")).violations.empty());
  EXPECT_EQ(bounds_for("no such schedule").explains_no_rerun, Bounds{}.explains_no_rerun);
}

TEST(NemesisSchedule, EveryNamedScheduleFitsItsLengthAndSaysWhatItFound) {
  ASSERT_FALSE(named_schedules().empty());
  for (const auto& s : named_schedules()) {
    EXPECT_EQ(find_named_schedule(s.name), &s);
    EXPECT_FALSE(s.failure.empty()) << s.name;
    ASSERT_FALSE(s.faults.empty()) << s.name;
    for (const auto& f : s.faults) EXPECT_LE(f.at_ms + f.for_ms, s.length_ms) << s.name << ": " << f.describe();
  }
  EXPECT_EQ(find_named_schedule("nope"), nullptr);
}

TEST(NemesisChecker, AClockStepForwardExplainsEarlyStartsWithinItsStepAndNoDuplicate) {
  History h = healthy();
  h.starts[0].start_us = (kDue - 3'000) * 1000;
  h.finals["j1"].finished_ms = kDue - 2'990;
  EXPECT_TRUE(says(check(h, Bounds{}), "EARLY"));
  h.faults.push_back({kDue - 4'000, kDue - 1'000, "clock", "clock of broker0 +5000 ms", 5'000});
  const Verdict within = check(h, Bounds{});
  EXPECT_TRUE(within.violations.empty()) << within.report();
  EXPECT_EQ(within.early_by_clock_step, 1U);
  h.faults[0].shift_ms = 2'000;  // less than the job was early
  EXPECT_TRUE(says(check(h, Bounds{}), "EARLY"));
  h = healthy();
  h.starts.push_back({"j1", 1, 12, (kDue + 5'000) * 1000, "w1"});
  h.faults.push_back({kDue + 2'000, kDue + 3'000, "clock", "clock of broker0 -5000 ms", -5'000});
  EXPECT_TRUE(says(check(h, Bounds{}), "no fault to explain it"));
}

TEST(NemesisChecker, OneDeliveryStartedTwiceIsAViolationWhateverTheFaults) {
  History h = healthy();
  h.starts.push_back({"j1", 1, 11, (kDue + 1'500) * 1000, "w1"});
  h.faults.push_back({kDue, kDue + 3'000, "pause", "broker0"});
  EXPECT_TRUE(says(check(h, Bounds{}), "started twice"));
}

TEST(NemesisChecker, EachEndMustBeTheOneItsJobCanHave) {
  History h = healthy();
  h.accepted[0].type = "fail";
  EXPECT_TRUE(says(check(h, Bounds{}), "always fails ended done"));
  h = ended("dead", "worker lost");
  EXPECT_TRUE(says(check(h, Bounds{}), "succeeds ended dead"));
  h.accepted[0].type = "fail";
  const Verdict failing = check(h, Bounds{});
  EXPECT_TRUE(failing.violations.empty()) << failing.report();
  EXPECT_EQ(failing.dead_by_reason.at("worker lost"), 1U);
  h.finals["j1"].error.clear();
  EXPECT_TRUE(says(check(h, Bounds{}), "dead without a reason"));
  h = ended("cancelled");
  EXPECT_TRUE(says(check(h, Bounds{}), "nobody asked"));
  h.cancels.push_back("j1");
  EXPECT_TRUE(check(h, Bounds{}).violations.empty());
  h.finals["j1"] = {"ready", 0, ""};
  EXPECT_TRUE(says(check(h, Bounds{}), "UNFINISHED"));
}

TEST(NemesisChecker, ADoneJobNeedsADeliveryStartedBeforeItsResult) {
  History h = healthy();
  h.finals["j1"].finished_ms = kDue + 500;  // before the only start
  EXPECT_TRUE(says(check(h, Bounds{}), "no delivery of it started"));
}

TEST(NemesisChecker, RunFactsBreakTheirOwnRules) {
  History h = healthy();
  h.facts["settled_ms"] = kDue + Bounds{}.settle_ms + 1;
  EXPECT_TRUE(says(check(h, Bounds{}), "STALL"));
  h = healthy();
  h.facts.erase("settled_ms");
  EXPECT_TRUE(says(check(h, Bounds{}), "never settled"));
  h = healthy();
  h.facts["audit"] = 1;
  EXPECT_TRUE(says(check(h, Bounds{}), "audit"));
  h = healthy();
  h.facts["stats_done"] = 2;
  EXPECT_TRUE(says(check(h, Bounds{}), "stats_done says 2, the history 1"));
  h = healthy();
  h.facts["broker_peak_rss_kb"] = Bounds{}.broker_rss_kb + 1;
  EXPECT_TRUE(says(check(h, Bounds{}), "peak RSS"));
}

TEST(NemesisHistory, FilesWrittenByTheRunReadBackAndABadLineIsNamed) {
  testing::TempDir dir("nemesis-history");
  append_line(dir / "accepted.tsv", {"j\x01", "noop", "5", "3", "accepted", "4"});
  append_line(dir / "faults.tsv", {"1", "2", "clock", "broker0", "-300"});
  append_line(dir / "final.tsv", {"j\x01", "dead", "7", hex("why\xff\n"), hex("fail"), "2"});
  append_line(dir / "facts.tsv", {"audit", "0"});
  append_line(dir / "reschedules.tsv", {"j\x01", "9"});
  append_line(dir / "deletes.tsv", {"q\xff", "10", "12"});
  append_line(dir / "deletes.tsv", {"old"});
  append_line(dir / "asks.tsv", {"j\x01", "11"});
  append_line(dir / "searches.tsv", {"j\x01", "8", "missing"});
  append_line(dir / "searches.tsv", {"j\x01", "9", "missing", "10", "0 jobs found; 3 looked at", "scheduled"});
  append_line(dir / "starts-worker0.txt", {"j\x01 2 99 6000 5 4 123 -"});
  std::string error;
  auto h = read_history(dir.path(), error);
  ASSERT_TRUE(h) << error;
  EXPECT_EQ(h->accepted.at(0).id, "j\x01");
  EXPECT_EQ(h->finals.at("j\x01").error, "why\xff\n");
  EXPECT_EQ(h->finals.at("j\x01").type, "fail");
  EXPECT_EQ(h->finals.at("j\x01").attempt, 2);
  EXPECT_EQ(h->reschedules.at("j\x01"), 9);
  EXPECT_EQ(h->deletes.at(0).queue, "q\xff");
  EXPECT_EQ(h->deletes.at(0).to_ms, 12);
  EXPECT_EQ(h->deletes.at(1).from_ms, 0) << "a run before deletes had times";
  EXPECT_TRUE(h->deleted_queues.contains("old"));
  EXPECT_EQ(h->asks.at("j\x01").at(0), 11);
  EXPECT_FALSE(h->searches.at(0).found);
  EXPECT_EQ(h->searches.at(1).answered_ms, 10);
  EXPECT_EQ(h->searches.at(1).summary, "0 jobs found; 3 looked at");
  EXPECT_EQ(h->searches.at(1).state_after, "scheduled");
  EXPECT_EQ(h->starts.at(0).token, 99U);
  EXPECT_EQ(h->starts.at(0).worker, "starts-worker0.txt");
  EXPECT_EQ(h->fact("audit"), 0);
  EXPECT_EQ(h->faults.at(0).shift_ms, -300);
  append_line(dir / "facts.tsv", {"audit", "zero"});
  EXPECT_FALSE(read_history(dir.path(), error));
  EXPECT_NE(error.find("facts.tsv:2"), std::string::npos) << error;
}

Nodes some_nodes() {
  return Nodes{{"broker0", "broker1"}, {"redis0", "redis1", "redis2"}, {"sentinel0", "sentinel1"}, {"worker0", "worker1"}};
}

TEST(NemesisSchedule, TheSameSeedDrawsTheSameScheduleAndFaultsFollowOneAnother) {
  const auto a = draw_schedule(7, 120'000, some_nodes()), b = draw_schedule(7, 120'000, some_nodes());
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 5U);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].describe(), b[i].describe());
    EXPECT_EQ(a[i].at_ms, b[i].at_ms);
    EXPECT_LE(a[i].at_ms + a[i].for_ms, 120'000);
    if (i > 0) {
      EXPECT_GT(a[i].at_ms, a[i - 1].at_ms + a[i - 1].for_ms);
    }
    if (a[i].kind == FaultKind::partition) {
      std::set<std::string> sides(a[i].side_a.begin(), a[i].side_a.end());
      for (const auto& node : a[i].side_b) EXPECT_TRUE(sides.insert(node).second) << a[i].describe();
      EXPECT_FALSE(a[i].side_b.empty());
    }
  }
  // Without store faults no Redis node is a target, and nothing fails over.
  for (const auto& f : draw_schedule(7, 600'000, some_nodes(), false)) {
    EXPECT_NE(f.kind, FaultKind::failover);
    EXPECT_NE(f.kind, FaultKind::demote);
    EXPECT_FALSE(f.target.starts_with("redis")) << f.describe();
    for (const auto& node : f.side_a) EXPECT_FALSE(node.starts_with("redis")) << f.describe();
  }
  // A run per fault class draws that class alone; an embedded store is
  // paused or killed like a node, and nothing fails over without Redis nodes.
  for (const auto& f : draw_schedule(7, 600'000, some_nodes(), true, {FaultKind::pause, FaultKind::clock}))
    EXPECT_TRUE(f.kind == FaultKind::pause || f.kind == FaultKind::clock) << f.describe();
  const Nodes embedded{{"broker0"}, {}, {}, {"worker0", "worker1"}, {"store0"}};
  bool store_hit = false;
  for (const auto& f : draw_schedule(7, 600'000, embedded)) {
    EXPECT_NE(f.kind, FaultKind::failover);
    EXPECT_NE(f.kind, FaultKind::demote);
    store_hit = store_hit || f.target == "store0";
    for (const auto& node : f.side_a) EXPECT_NE(node, "store0") << "it has no address to cut";
  }
  // A side drawn from fewer nodes than asked for holds only those nodes.
  for (uint64_t seed = 1; seed <= 30; ++seed)
    for (const auto& f : draw_schedule(seed, 600'000, embedded))
      for (const auto& node : f.side_b) EXPECT_FALSE(node.empty()) << "seed " << seed << ": " << f.describe();
  EXPECT_TRUE(store_hit);
  EXPECT_TRUE(draw_schedule(7, 600'000, embedded, true, {FaultKind::failover}).empty());
  EXPECT_TRUE(draw_schedule(7, 600'000, some_nodes(), true, {FaultKind::stop}).empty());
  // A Redis Cluster fails over, and is never demoted.
  Nodes cluster = some_nodes();
  cluster.cluster = true;
  EXPECT_TRUE(draw_schedule(7, 600'000, cluster, true, {FaultKind::demote}).empty());
  EXPECT_FALSE(draw_schedule(7, 600'000, cluster, true, {FaultKind::failover}).empty());
  EXPECT_EQ(fault_kind_named("demote"), FaultKind::demote);
  EXPECT_EQ(fault_kind_named("poison"), std::nullopt);
  const auto other = draw_schedule(8, 120'000, some_nodes());
  std::string mine, theirs;
  for (const auto& f : a) mine += f.describe() + ";";
  for (const auto& f : other) theirs += f.describe() + ";";
  EXPECT_NE(mine, theirs);
}

// A link fault hits a node whose links run through a proxy: a broker that
// reaches Redis over the network, or a worker; never a Redis node, a
// sentinel or an embedded store. A broker's link is no store fault.
TEST(NemesisSchedule, LinkFaultsHitBrokersAndWorkersWithBoundedDelays) {
  size_t slow = 0, hold = 0, broker_links = 0;
  for (const bool store_faults : {true, false})
    for (const auto& f : draw_schedule(11, 1'200'000, some_nodes(), store_faults, {FaultKind::slow, FaultKind::hold})) {
      ASSERT_TRUE(f.kind == FaultKind::slow || f.kind == FaultKind::hold) << f.describe();
      EXPECT_TRUE(f.target.starts_with("broker") || f.target.starts_with("worker")) << f.describe();
      broker_links += f.target.starts_with("broker") ? 1 : 0;
      if (f.kind == FaultKind::hold) {
        ++hold;
        continue;
      }
      ++slow;
      EXPECT_TRUE(f.delay_ms >= 1 && f.delay_ms <= 300 && f.jitter_ms >= 0 && f.jitter_ms <= 200) << f.describe();
      EXPECT_TRUE(f.loss_permille >= 0 && f.loss_permille <= 100) << f.describe();
    }
  EXPECT_GT(slow, 10U);
  EXPECT_GT(hold, 10U);
  EXPECT_GT(broker_links, 0U);
  const Nodes embedded{{"broker0"}, {}, {}, {"worker0", "worker1"}, {"store0"}};
  for (const auto& f : draw_schedule(11, 600'000, embedded, true, {FaultKind::slow, FaultKind::hold}))
    EXPECT_TRUE(f.target.starts_with("worker")) << "the broker reaches its store over a unix socket: " << f.describe();
  EXPECT_EQ(fault_kind_named("hold"), FaultKind::hold);
}

// A full disk is a store fault: a Redis node's or an embedded store's, and
// none without store faults.
TEST(NemesisSchedule, AFullDiskHitsAStoreOnly) {
  const auto disks = draw_schedule(5, 600'000, some_nodes(), true, {FaultKind::disk});
  EXPECT_GT(disks.size(), 10U);
  for (const auto& f : disks) EXPECT_TRUE(f.target.starts_with("redis")) << f.describe();
  const Nodes embedded{{"broker0"}, {}, {}, {"worker0"}, {"store0"}};
  for (const auto& f : draw_schedule(5, 600'000, embedded, true, {FaultKind::disk})) EXPECT_EQ(f.target, "store0");
  EXPECT_TRUE(draw_schedule(5, 600'000, some_nodes(), false, {FaultKind::disk}).empty());
  EXPECT_TRUE(draw_schedule(5, 600'000, embedded, false, {FaultKind::disk}).empty());
}


// Two jobs of key "acct" in the ordered queue, a due 1 s before b, each
// started once and done, b after a's run: the rule holds.
History ordered_pair() {
  History h;
  h.accepted.push_back({"a", "sleep", kDue, 3, true, kDue - 5'000, "o"});
  h.accepted.push_back({"b", "sleep", kDue + 1'000, 3, true, kDue - 5'000, "o"});
  h.keys = {{"a", "acct"}, {"b", "acct"}};
  h.starts.push_back({"a", 1, 11, (kDue + 1'000) * 1000, "w0"});
  h.starts.push_back({"b", 1, 12, (kDue + 1'000 + kOrderedRunMs + 5) * 1000, "w1"});
  h.finals["a"] = {"done", kDue + 1'100, "", "sleep", 1};
  h.finals["b"] = {"done", kDue + 1'200, "", "sleep", 1};
  h.facts = {{"healed_ms", kDue}, {"settled_ms", kDue + 3'000}, {"audit", 0}, {"stats_done", 2}, {"stats_dead", 0},
             {"stats_cancelled", 0}, {"stats_accepted", 2}, {"stats_in_flight", 0}};
  return h;
}

TEST(NemesisChecker, AnOrderedKeysJobsOneAtATimeInDueOrderPass) {
  const Verdict v = check(ordered_pair(), Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
  EXPECT_EQ(v.keyed_jobs, 2U);
  EXPECT_EQ(v.keys, 1U);
}

TEST(NemesisChecker, AKeysJobStartedWhileAnotherRanFails) {
  History h = ordered_pair();
  h.starts[1].start_us = (kDue + 1'010) * 1000;  // 10 ms into a's run
  EXPECT_TRUE(says(check(h, Bounds{}), "b: key acct: started 10000 us after a started, while it ran"));
  h.keys["b"] = "other";  // another key: no rule between them
  EXPECT_TRUE(check(h, Bounds{}).violations.empty());
}

TEST(NemesisChecker, AJobStartedAgainAfterALaterOneTookTheTurnFails) {
  History h = ordered_pair();
  h.starts.push_back({"a", 2, 13, (kDue + 1'500) * 1000, "w0"});
  const Verdict v = check(h, Bounds{});
  EXPECT_TRUE(says(v, "a: key acct: started again after b had taken the key's turn")) << v.report();
}

// A fail-over that lost the ends of a key's runs runs them again, in due
// order, once a broker leads: the fault since each one's last start
// explains it; with none, each is a violation.
TEST(NemesisChecker, AKeysJobsRunAgainAfterAFaultSinceTheirLastStartAreExcused) {
  History h = ordered_pair();
  h.starts.push_back({"a", 2, 13, (kDue + 60'000) * 1000, "w0"});
  h.starts.push_back({"b", 2, 14, (kDue + 60'000 + kOrderedRunMs + 5) * 1000, "w1"});
  const Verdict unexcused = check(h, Bounds{});
  EXPECT_TRUE(says(unexcused, "a: key acct: started again after b had taken the key's turn")) << unexcused.report();
  EXPECT_TRUE(says(unexcused, "b: key acct: started again after a had taken the key's turn")) << unexcused.report();
  h.faults.push_back({kDue + 1'100 + kOrderedRunMs, kDue + 5'000, "failover", "redis0"});
  const Verdict excused = check(h, Bounds{});
  EXPECT_FALSE(says(excused, "had taken the key's turn")) << excused.report();
  EXPECT_EQ(excused.key_turns_excused, 2U);
}

TEST(NemesisChecker, AKeysLaterDueJobFirstFailsUnlessAFaultOrTheSlackExplainsIt) {
  History h = ordered_pair();
  std::swap(h.starts[0].start_us, h.starts[1].start_us);
  EXPECT_TRUE(says(check(h, Bounds{}), "b: key acct: started before a, due 1000 ms earlier and waiting"));
  h.faults.push_back({kDue, kDue + 500, "failover", "redis0"});
  const Verdict excused = check(h, Bounds{});
  EXPECT_FALSE(says(excused, "key acct")) << excused.report();
  EXPECT_GT(excused.key_order_excused, 0U);
  EXPECT_EQ(excused.key_turns_excused, 0U);
  h.faults.clear();
  h.accepted[0].due_ms = kDue + 500;  // a due 500 ms before b's start: still within the promote slack
  h.finals["a"].finished_ms = kDue + 1'300;
  EXPECT_FALSE(says(check(h, Bounds{}), "key acct"));
}

// A job asked due now is due when the broker took it: the due time its
// start was sent with counts, not the 0 its producer asked for.
TEST(NemesisChecker, AJobAskedDueNowIsHeldToTheDueTimeTheBrokerSentIt) {
  History h = ordered_pair();
  h.accepted[1].due_ms = 0;                // b asked due now ...
  h.accepted[1].answered_ms = kDue + 990;  // (and answered then)
  h.starts[1].due_ms = kDue + 1'000;       // ... which the broker made kDue + 1 s
  h.starts[0].due_ms = kDue;
  std::swap(h.starts[0].start_us, h.starts[1].start_us);  // b first: out of order
  EXPECT_TRUE(says(check(h, Bounds{}), "b: key acct: started before a, due 1000 ms earlier and waiting"));
  std::swap(h.starts[0].start_us, h.starts[1].start_us);  // a first: in order, though b's asked due is 0
  const Verdict v = check(h, Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
}
// The unique jobs' rule (unique_holds.hpp): a job accepted with a unique key
// while its holder was surely unfinished, or answered held by a job that had
// surely finished, is a violation, unless a fault was near or the holder ran
// again; a holder the broker names must be a job accepted with that key.
TEST(NemesisUniqueHolds, TwoHoldersOrAFinishedHolderAreViolationsAFaultNearExcuses) {
  History h;
  h.uniques = {{"u1", "k", "accepted", 1'000, 1'010, ""},
               {"u2", "k", "held", 1'100, 1'110, "u1"},
               {"u3", "k", "accepted", 2'000, 2'010, ""}};
  h.finals["u1"] = {"done", 1'500, "", "sleep", 1};
  h.finals["u3"] = {"done", 2'500, "", "sleep", 1};
  h.starts = {{"u1", 1, 1, 1'100'000, "w0"}, {"u3", 1, 2, 2'100'000, "w0"}};
  auto no_fault = [](int64_t, int64_t) -> const FaultSpan* { return nullptr; };
  auto found = check_unique_holds(h, no_fault);
  EXPECT_TRUE(found.violations.empty()) << found.violations.front();
  EXPECT_EQ(found.accepted, 2U);
  EXPECT_EQ(found.held, 1U);
  EXPECT_EQ(found.keys, 1U);

  h.finals["u1"].finished_ms = 2'100;  // u3 was accepted while u1 still held k
  found = check_unique_holds(h, no_fault);
  ASSERT_EQ(found.violations.size(), 1U);
  EXPECT_NE(found.violations[0].find("UNIQUE KEY HELD TWICE"), std::string::npos) << found.violations[0];
  const FaultSpan failover{1'900, 2'000, "failover", "", 0};
  EXPECT_TRUE(check_unique_holds(h, [&](int64_t, int64_t) { return &failover; }).violations.empty());
  h.starts.push_back({"u1", 2, 3, 2'050'000, "w1"});
  found = check_unique_holds(h, no_fault);
  EXPECT_TRUE(found.violations.empty()) << "u1 ran again: a lost ack held k again";
  EXPECT_EQ(found.excused, 1U);

  h.starts.pop_back();
  h.finals["u1"].finished_ms = 1'050;  // u2 was asked 50 ms after u1 finished
  found = check_unique_holds(h, no_fault);
  ASSERT_EQ(found.violations.size(), 1U);
  EXPECT_NE(found.violations[0].find("HELD BY A FINISHED JOB"), std::string::npos) << found.violations[0];

  h.finals["u1"].finished_ms = 1'500;
  h.uniques[1].holder = "u9";
  found = check_unique_holds(h, no_fault);
  ASSERT_EQ(found.violations.size(), 1U);
  EXPECT_NE(found.violations[0].find("not a job accepted with unique key k"), std::string::npos);
}

// Debounced jobs: two may hold one key in turn and run at once; a job
// debounced into one that had started, or that ran with another payload
// than the last debounced into it, is a violation.
TEST(NemesisUniqueHolds, ADebounceIntoAStartedJobOrALostPayloadIsAViolation) {
  History h;
  h.uniques = {{"d1", "db", "accepted", 1'000, 1'010, "", "debounce", "100"},
               {"d2", "db", "held", 1'100, 1'110, "d1", "debounce", "200"},
               {"d3", "db", "accepted", 2'000, 2'010, "", "debounce", "300"}};
  h.finals["d1"] = {"done", 2'600, "", "sleep", 1};
  h.finals["d3"] = {"done", 3'600, "", "sleep", 1};
  h.starts = {{"d1", 1, 1, 1'900'000, "w0", 0, "200"}, {"d3", 1, 2, 3'000'000, "w0", 0, "300"}};
  auto no_fault = [](int64_t, int64_t) -> const FaultSpan* { return nullptr; };
  auto found = check_unique_holds(h, no_fault);
  EXPECT_TRUE(found.violations.empty()) << found.violations.front() << " (d3 may run while d1 does)";
  EXPECT_EQ(found.debounced, 1U);
  h.starts[0].payload = "100";
  found = check_unique_holds(h, no_fault);
  ASSERT_EQ(found.violations.size(), 1U);
  EXPECT_NE(found.violations[0].find("DEBOUNCED PAYLOAD LOST"), std::string::npos) << found.violations[0];
  h.starts[0] = {"d1", 1, 1, 1'050'000, "w0", 0, "200"};  // d1 started before d2 was asked
  found = check_unique_holds(h, no_fault);
  ASSERT_EQ(found.violations.size(), 1U);
  EXPECT_NE(found.violations[0].find("DEBOUNCED INTO A STARTED JOB"), std::string::npos) << found.violations[0];
}

// A flow P <- {A (fail_parent), B (ignore)} and a batch with members m1,
// m2 and callbacks s, c: each rule fails the history that breaks it.
History groups_history() {
  History h;
  h.group_jobs = {{"P", "fP", "", '-', "noop", 'j', true},   {"A", "fP", "P", 'f', "noop", 'j', true},
                  {"B", "fP", "P", 'i', "fail", 'j', true},  {"s", "bX", "", '-', "noop", 's', true},
                  {"c", "bX", "", '-', "noop", 'c', true},   {"m1", "bX", "", '-', "noop", 'j', true},
                  {"m2", "bX", "", '-', "noop", 'j', true}};
  h.finals = {{"P", {"done", 5'000, "", "noop", 1}},  {"A", {"done", 2'000, "", "noop", 1}},
              {"B", {"dead", 2'500, "asked to fail", "fail", 1}}, {"s", {"done", 6'000, "", "noop", 1}},
              {"c", {"done", 6'000, "", "noop", 1}}, {"m1", {"done", 3'000, "", "noop", 1}},
              {"m2", {"done", 3'100, "", "noop", 1}}};
  h.starts = {{"A", 1, 1, 1'900'000, "w0"}, {"B", 1, 2, 2'400'000, "w0"}, {"P", 1, 3, 4'900'000, "w0"},
              {"m1", 1, 4, 2'900'000, "w0"}, {"m2", 1, 5, 3'000'000, "w0"}, {"s", 1, 6, 5'900'000, "w0"},
              {"c", 1, 7, 5'950'000, "w0"}};
  h.facts = {{"flow_stats_accepted", 7}, {"flow_stats_done", 6}, {"flow_stats_dead", 1}, {"flow_stats_cancelled", 0},
             {"flow_stats_in_flight", 0}};
  return h;
}

bool group_says(const GroupFindings& f, const std::string& needle) {
  return std::any_of(f.violations.begin(), f.violations.end(), [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}

TEST(NemesisGroups, EachRuleOfFlowsAndBatchesFailsTheHistoryThatBreaksIt) {
  auto no_fault = [](int64_t, int64_t) -> const FaultSpan* { return nullptr; };
  History h = groups_history();
  auto found = check_groups(h, no_fault);
  EXPECT_TRUE(found.violations.empty()) << found.violations.front();
  EXPECT_EQ(found.flows, 1U);
  EXPECT_EQ(found.batches, 1U);
  EXPECT_EQ(found.parents_ran, 1U);
  EXPECT_EQ(found.callbacks_ran, 2U);

  h = groups_history();  // the parent started before its child ever did: nothing excuses it
  h.starts[2].start_us = 1'800'000;
  const FaultSpan failover{1'500, 2'000, "failover", "", 0};
  EXPECT_TRUE(group_says(check_groups(h, [&](int64_t, int64_t) { return &failover; }), "A PARENT STARTED BEFORE A EVER DID"));
  h = groups_history();  // the parent started after its child B's start, but before B ended
  h.starts[2].start_us = 2'450'000;
  EXPECT_TRUE(group_says(check_groups(h, no_fault), "A PARENT STARTED 50 ms BEFORE B ENDED"));
  EXPECT_TRUE(check_groups(h, [&](int64_t, int64_t) { return &failover; }).violations.empty()) << "a fault near excuses it";
  h = groups_history();  // a delivery of the child sent again started after the parent: the first one ended it
  h.starts.push_back({"A", 1, 9, 5'000'000, "w1"});
  EXPECT_TRUE(check_groups(h, no_fault).violations.empty()) << check_groups(h, no_fault).violations.front();

  h = groups_history();  // the parent ran twice
  h.starts.push_back({"P", 2, 8, 5'500'000, "w1"});
  EXPECT_TRUE(group_says(check_groups(h, no_fault), "A PARENT RAN 2 TIMES"));

  h = groups_history();  // A failed under fail_parent: P must be dead, naming it, and never run
  h.finals["A"] = {"dead", 2'000, "boom", "noop", 1};
  h.facts["flow_stats_done"] = 5;
  h.facts["flow_stats_dead"] = 2;
  EXPECT_TRUE(group_says(check_groups(h, no_fault), "P: its child A failed it, but it is done"));
  h.finals["P"] = {"dead", 2'000, "child A dead: boom", "noop", 0};
  h.facts["flow_stats_done"] = 4;
  h.facts["flow_stats_dead"] = 3;
  EXPECT_TRUE(group_says(check_groups(h, no_fault), "A PARENT ITS CHILD FAILED ran 1 times"));
  h.starts.erase(h.starts.begin() + 2);
  found = check_groups(h, no_fault);
  EXPECT_TRUE(found.violations.empty()) << found.violations.front();
  EXPECT_EQ(found.parents_failed, 1U);
  // Two children under fail_parent died: either may be the one named.
  h.group_jobs[2].policy = 'f';
  h.finals["P"].error = "child B dead: asked to fail";
  found = check_groups(h, no_fault);
  EXPECT_TRUE(found.violations.empty()) << found.violations.front();
  h.finals["P"].error = "child Z dead: ?";
  EXPECT_TRUE(group_says(check_groups(h, no_fault), "P: its child A failed it, but it is dead"));

  h = groups_history();  // a member died: the success callback must be cancelled, never run
  h.finals["m2"] = {"dead", 3'100, "x", "noop", 1};
  h.facts["flow_stats_done"] = 5;
  h.facts["flow_stats_dead"] = 2;
  found = check_groups(h, no_fault);
  EXPECT_TRUE(group_says(found, "a member failed, but the success callback is done"));
  EXPECT_TRUE(group_says(found, "A SUCCESS CALLBACK OF A FAILED BATCH ran 1 times"));

  h = groups_history();  // the complete callback ran before a member started
  h.starts[6].start_us = 2'950'000;
  EXPECT_TRUE(group_says(check_groups(h, no_fault), "A COMPLETE CALLBACK STARTED BEFORE m2 EVER DID"));

  h = groups_history();  // a job of a stored group the broker does not know; counters that disagree
  h.finals.erase("m1");
  found = check_groups(h, no_fault);
  EXPECT_TRUE(group_says(found, "m1: LOST"));
  EXPECT_TRUE(group_says(found, "flow_stats_accepted says 7, the history 6"));

  h = groups_history();  // a batch not surely closed: its callbacks are owed nothing
  h.group_jobs[3].surely = h.group_jobs[4].surely = false;
  h.finals["s"] = h.finals["c"] = {"held", 0, "", "noop", 0};
  h.facts["flow_stats_done"] = 4;
  EXPECT_TRUE(check_groups(h, no_fault).violations.empty());
}

TEST(NemesisHistory, GroupJobsReadBackAndABadLineIsRefused) {
  testing::TempDir dir("nemesis-groups");
  append_line(dir / "groups.tsv", {"F1.c0", "fF1.r", "F1.r", "f", "fail", "j", "accepted"});
  append_line(dir / "groups.tsv", {"B3.s", "bB3.", "", "-", "noop", "s", "unknown"});
  std::string error;
  auto h = read_history(dir.path(), error);
  ASSERT_TRUE(h) << error;
  ASSERT_EQ(h->group_jobs.size(), 2U);
  EXPECT_EQ(h->group_jobs[0].parent, "F1.r");
  EXPECT_EQ(h->group_jobs[0].policy, 'f');
  EXPECT_FALSE(h->group_jobs[1].surely);
  append_line(dir / "groups.tsv", {"x", "fF1.r", "F1.r", "z", "noop", "j", "accepted"});
  EXPECT_FALSE(read_history(dir.path(), error)) << "a policy other than f, i, c or -";
}

TEST(NemesisHistory, UniqueAsksReadBackAndABadLineIsRefused) {
  testing::TempDir dir("nemesis-unique");
  append_line(dir / "unique.tsv", {"u1", "k\xff", "accepted", "1", "2", ""});
  append_line(dir / "unique.tsv", {"u2", "k\xff", "held", "3", "4", "u1"});
  std::string error;
  auto h = read_history(dir.path(), error);
  ASSERT_TRUE(h) << error;
  ASSERT_EQ(h->uniques.size(), 2U);
  EXPECT_EQ(h->uniques[1].holder, "u1");
  EXPECT_EQ(h->uniques[0].unique_key, "k\xff");
  append_line(dir / "unique.tsv", {"u3", "k", "held", "5", "6", ""});
  EXPECT_FALSE(read_history(dir.path(), error)) << "held names its holder";
}


// A debounced job's bound comes from the clock of the broker that took it:
// one stepped back while it took the job may run it early by that step, and
// only a debounced job, and only by that much.
TEST(NemesisChecker, ADebouncedJobTakenWhileABrokersClockRanBehindMayStartEarlyByTheStep) {
  History h = healthy();
  h.starts[0].start_us = (kDue - 400) * 1000;
  h.finals["j1"].finished_ms = kDue - 390;
  h.faults.push_back({kDue - 9'000, kDue - 5'000, "clock", "clock of broker0 -1000 ms", -1'000});
  EXPECT_TRUE(says(check(h, Bounds{}), "EARLY")) << "not a debounced job";
  h.uniques.push_back({"j1", "db-1", "accepted", kDue - 8'000, kDue - 7'950, "", "debounce", "1"});
  const Verdict excused = check(h, Bounds{});
  EXPECT_TRUE(excused.violations.empty()) << excused.report();
  EXPECT_EQ(excused.early_by_clock_step, 1U);
  h.starts[0].start_us = (kDue - 1'500) * 1000;
  h.finals["j1"].finished_ms = kDue - 1'490;
  EXPECT_TRUE(says(check(h, Bounds{}), "EARLY")) << "earlier than the step";
  h.starts[0].start_us = (kDue - 400) * 1000;
  h.finals["j1"].finished_ms = kDue - 390;
  h.uniques[0].sent_ms = kDue - 4'000;  // taken after the clock was set right
  h.uniques[0].answered_ms = kDue - 3'950;
  EXPECT_TRUE(says(check(h, Bounds{}), "EARLY")) << "no clock fault while it was taken";
}

}  // namespace
}  // namespace dueq::nemesis

namespace dueq::nemesis {
namespace {

// A snoozed job runs again as the same attempt no sooner than its delay; a
// start again sooner, or as the next attempt, needs a fault like any other.
TEST(NemesisChecker, ASnoozedJobRunsAgainAsTheSameAttemptAfterItsDelayOnly) {
  History h = healthy();
  h.accepted[0].type = "snooze_once";
  h.finals["j1"].type = "snooze_once";
  h.starts.push_back({"j1", 1, 12, (kDue + 1'000 + kSnoozeMs) * 1000, "w0"});
  h.finals["j1"].finished_ms = kDue + 1'000 + kSnoozeMs + 10;
  const Verdict snoozed = check(h, Bounds{});
  EXPECT_TRUE(snoozed.violations.empty()) << snoozed.report();
  EXPECT_EQ(snoozed.snoozes, 1U);
  h.starts[1].start_us -= 1'000;  // a millisecond too soon
  EXPECT_TRUE(says(check(h, Bounds{}), "no fault to explain it"));
  h.starts[1].start_us += 1'000;
  h.starts[1].attempt = 2;  // a snooze uses no attempt
  EXPECT_TRUE(says(check(h, Bounds{}), "no fault to explain it"));
}

// A job sent with a trace context: each start recorded with one was handed
// it; a job sent without one, none; a start recorded without the field (a
// Python worker, an older run) is not held to it.
TEST(NemesisChecker, EveryRecordedStartOfATracedJobWasHandedItsTraceContext) {
  constexpr const char* kSent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  History h = healthy();
  h.traces["j1"] = kSent;
  h.starts[0].traceparent = kSent;
  Verdict v = check(h, Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
  EXPECT_EQ(v.traced_starts, 1U);
  h.starts[0].traceparent = "-";
  EXPECT_TRUE(says(check(h, Bounds{}), "j1: TRACE CONTEXT LOST"));
  h.starts[0].traceparent = "";
  EXPECT_TRUE(check(h, Bounds{}).violations.empty());
  h.traces.clear();
  h.starts[0].traceparent = kSent;
  EXPECT_TRUE(says(check(h, Bounds{}), "was sent with '-'")) << "handed one it was not sent with";
}

// An edit answered done: the job's last start carries the edited payload.
TEST(NemesisChecker, AnEditedJobsLastStartCarriesTheEditedPayload) {
  History h = healthy();
  h.edits["j1"] = kEditedPayload;
  h.starts[0].payload = kEditedPayload;
  Verdict v = check(h, Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
  EXPECT_EQ(v.edited, 1U);
  h.starts[0].payload = "900";
  EXPECT_TRUE(says(check(h, Bounds{}), "j1: EDIT LOST"));
}

// A job with a start-by deadline may end dead "expired", and never starts past it.
TEST(NemesisChecker, AJobWithADeadlineMayExpireButNeverStartsPastIt) {
  History h = healthy();
  h.deadlines["j1"] = kDue + 4'000;
  Verdict v = check(h, Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
  h.deadlines["j1"] = kDue + 500;  // started 1 s after its due time
  EXPECT_TRUE(says(check(h, Bounds{}), "j1: PAST ITS DEADLINE"));
  History expired = ended("dead", "expired: not started by 2027-01-15T08:00:04.000Z");
  expired.starts.clear();
  expired.deadlines["j1"] = kDue + 4'000;
  EXPECT_TRUE(says(check(expired, Bounds{}), "j1: EXPIRED with no fault")) << "no fault came near it";
  expired.faults.push_back({kDue + 1'000, kDue + 2'000, "partition", "worker0 <-/-> broker0"});
  v = check(expired, Bounds{});
  EXPECT_TRUE(v.violations.empty()) << v.report();
  EXPECT_EQ(v.expired, 1U);
  expired.deadlines.clear();
  EXPECT_TRUE(says(check(expired, Bounds{}), "a job that succeeds ended dead"));
}

}  // namespace
}  // namespace dueq::nemesis
