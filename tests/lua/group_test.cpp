// Flows and batches (lua/enqueue_group.lua, lua/lib/group.lua and the
// scripts that settle jobs): a parent waits for its children, a batch's
// callbacks wait for its members, each released or failed in the step that
// settles the last of them, and the audit's books balance throughout.
#include "broker/admin/group_commands.hpp"
#include "broker/loop/group_enqueuer.hpp"
#include "broker/loop/queue_remover.hpp"
#include "scripts_fixture.hpp"

namespace dueq::testing::scripts {
namespace {

using proto::BatchAction;
using proto::ChildFailure;
using proto::GroupRole;

proto::GroupJob member(std::string id, uint32_t parent = 0, ChildFailure on_failure = ChildFailure::none,
                       int64_t due = 0, GroupRole role = GroupRole::job) {
  return proto::GroupJob{job(std::move(id), due), parent, on_failure, role};
}

proto::GroupEnqueue flow(std::vector<proto::GroupJob> jobs) {
  return proto::GroupEnqueue{0, "q", "", BatchAction::none, false, std::move(jobs)};
}

proto::GroupEnqueue batch(std::string id, BatchAction action, bool close, std::vector<proto::GroupJob> jobs) {
  return proto::GroupEnqueue{0, "q", std::move(id), action, close, std::move(jobs)};
}

class Groups : public Scripts {
 protected:
  calls::GroupEnqueueOutcome put(const proto::GroupEnqueue& request, int64_t now, int64_t max_backlog = 0,
                                 int64_t max_members = proto::GroupEnqueue::kMaxBatchMembers) {
    Round round;
    round.add(calls::enqueue_group(request, now, 3, max_backlog, 60, max_members));
    const redisReply* r = run(round);
    auto outcome = calls::parse_enqueue_group(r);
    EXPECT_TRUE(outcome) << reply_error(r);
    return outcome ? *outcome : calls::GroupEnqueueOutcome{};
  }
  std::string put_error(const proto::GroupEnqueue& request, int64_t now) {
    Round round;
    round.add(calls::enqueue_group(request, now, 3, 0, 60));
    return std::string(reply_error(run(round)));
  }
  // promote.lua at `now`: how many jobs it moved to ready.
  int64_t promote(int64_t now) {
    Round round;
    round.add(calls::promote("q", now, 1000));
    auto p = calls::parse_promote(run(round));
    EXPECT_TRUE(p);
    return p ? p->moved : -1;
  }
  std::map<std::string, LeasedJob> lease_all(int64_t deadline) {
    std::map<std::string, LeasedJob> out;
    for (auto& l : lease(1000, deadline)) out.emplace(l.id, l);
    return out;
  }
  // Acks `ids`: the released due ms (ack.lua's last value).
  int64_t ack(const std::map<std::string, LeasedJob>& leased, const std::vector<std::string>& ids, int64_t now,
              const std::string& result = "") {
    std::vector<AckItem> items;
    for (const auto& id : ids) items.push_back({id, leased.at(id).token, 0, "", result});
    Round round;
    round.add(calls::ack("q", now, 60, items));
    const redisReply* r = run(round);
    auto applied = calls::parse_ack(r);
    EXPECT_TRUE(applied) << reply_error(r);
    if (applied) {
      EXPECT_EQ(std::count(applied->begin(), applied->end(), AckStatus::applied), std::ssize(ids));
    }
    return calls::released_due(r);
  }
  int64_t nack(const LeasedJob& l, NackMode mode, const std::string& why, int64_t now) {
    Round round;
    round.add(calls::nack("q", now, 0, 0, 60, {{l.id, l.token, mode, why, 0}}));
    const redisReply* r = run(round);
    EXPECT_TRUE(calls::parse_nack(r)) << reply_error(r);
    return calls::released_due(r);
  }
  CancelOutcome cancel(const std::string& id, int64_t now) {
    Round round;
    round.add(calls::cancel("q", now, id, 60, false));
    const redisReply* r = run(round);
    auto outcome = calls::parse_cancel(r);
    EXPECT_TRUE(outcome) << reply_error(r);
    return outcome ? *outcome : CancelOutcome{};
  }
  // group_show.lua's whole reply as strings.
  std::vector<std::string> show(const std::string& group, int64_t count = 100) {
    Round round;
    round.add(calls::group_show("q", group, "0", count));
    auto values = strs(run(round));
    EXPECT_TRUE(values);
    return values ? *values : std::vector<std::string>{};
  }
  // The group's status field as group_show.lua names it.
  std::string status(const std::string& group, const std::string& name) {
    static const std::vector<std::string> kNames{"kind",   "state",   "open",     "total",    "pending", "done",
                                                 "dead",   "cancelled", "parent", "success", "complete", "settled"};
    auto values = show(group, 0);
    const auto at = std::find(kNames.begin(), kNames.end(), name) - kNames.begin();
    return static_cast<size_t>(at) < values.size() ? values[at] : "(no group)";
  }
  void expect_books_balance() {
    Round round;
    round.add(calls::audit("q", {}));
    auto counts = calls::parse_audit(run(round))->counts;
    EXPECT_EQ(counts.imbalance(), 0) << "accepted " << counts.accepted << " scheduled " << counts.scheduled
                                     << " ready " << counts.ready << " leased " << counts.leased << " dead "
                                     << counts.dead << " done " << counts.done << " cancelled " << counts.cancelled;
  }
};

TEST_F(Groups, AParentWaitsForItsChildrenAndIsDueInTheStepThatSettlesTheLast) {
  ASSERT_EQ(put(flow({member("P"), member("A", 1, ChildFailure::fail_parent), member("B", 1, ChildFailure::fail_parent)}), 1000).code,
            calls::GroupEnqueued::accepted);
  EXPECT_EQ(field("P", "s"), "held");
  EXPECT_EQ(field("P", "r"), "1000");  // its own due time, not the far end of the schedule
  EXPECT_EQ(field("P", "gc"), "1");
  EXPECT_EQ(field("A", "gp"), "P");
  EXPECT_EQ(field("A", "s"), "ready") << "a child due now is in line at once";
  EXPECT_EQ(promote(1000), 0);  // nothing due: the parent is held
  auto leased = lease_all(9000);
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_EQ(ack(leased, {"A"}, 2000, "a's result"), -1);
  EXPECT_EQ(field("P", "s"), "held");
  EXPECT_EQ(status("fP", "pending"), "1");
  EXPECT_EQ(ack(leased, {"B"}, 3000), 3000);  // released now: its own due time has passed
  EXPECT_EQ(field("P", "s"), "ready") << "in the step that settled its last child";
  EXPECT_EQ(field("P", "r"), "1000");
  EXPECT_EQ(status("fP", "state"), "settled");
  EXPECT_EQ(status("fP", "done"), "2");
  EXPECT_EQ(promote(3000), 0);
  auto parent = lease_all(9000);
  ASSERT_TRUE(parent.contains("P"));
  // The parent's handler reads its children and their results.
  auto page = show("fP");
  ASSERT_EQ(page.size(), 13u + 8u);
  std::map<std::string, std::pair<std::string, std::string>> children;
  for (size_t i = 13; i + 3 < page.size(); i += 4) children[page[i]] = {page[i + 1], page[i + 2]};
  EXPECT_EQ(children["A"], std::make_pair(std::string("done"), std::string("a's result")));
  EXPECT_EQ(children["B"].first, "done");
  expect_books_balance();
}

TEST_F(Groups, AParentDueLaterThanItsLastChildKeepsItsOwnDueTime) {
  ASSERT_EQ(put(flow({member("P", 0, ChildFailure::none, 50'000), member("A", 1, ChildFailure::ignore)}), 1000).code,
            calls::GroupEnqueued::accepted);
  promote(1000);
  auto leased = lease_all(9000);
  EXPECT_EQ(ack(leased, {"A"}, 2000), 50'000);
  EXPECT_EQ(field("P", "s"), "scheduled");
  EXPECT_EQ(field("P", "r"), "50000");
  EXPECT_EQ(promote(49'999), 0);
  EXPECT_EQ(promote(50'000), 1);
  expect_books_balance();
}

TEST_F(Groups, AFailedChildFailsItsParentAndTheGrandparentHearsOfIt) {
  // G <- P <- C (fail_parent all the way), and G <- S (ignore).
  ASSERT_EQ(put(flow({member("G"), member("P", 1, ChildFailure::fail_parent), member("C", 2, ChildFailure::fail_parent),
                      member("S", 1, ChildFailure::ignore)}),
                1000)
                .code,
            calls::GroupEnqueued::accepted);
  EXPECT_EQ(promote(1000), 0);  // C and S are ready; P and G are held
  auto leased = lease_all(9000);
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_EQ(nack(leased.at("C"), NackMode::dead, "boom", 2000), -1);
  EXPECT_EQ(field("P", "s"), "dead");
  EXPECT_EQ(field("P", "e"), "child C dead: boom");
  EXPECT_EQ(field("G", "s"), "dead");
  EXPECT_EQ(field("G", "e"), "child P dead: child C dead: boom");
  EXPECT_EQ(status("fG", "state"), "failed");
  // S runs on and settles into a failed group: nothing more happens.
  EXPECT_EQ(ack(leased, {"S"}, 3000), -1);
  EXPECT_EQ(field("G", "s"), "dead");
  expect_books_balance();
}

TEST_F(Groups, IgnoredAndContinuedFailuresLetTheParentRunAndAreCounted) {
  ASSERT_EQ(put(flow({member("P"), member("I", 1, ChildFailure::ignore), member("K", 1, ChildFailure::proceed)}), 1000).code,
            calls::GroupEnqueued::accepted);
  promote(1000);
  auto leased = lease_all(9000);
  EXPECT_EQ(nack(leased.at("I"), NackMode::dead, "bad", 2000), -1);
  EXPECT_EQ(nack(leased.at("K"), NackMode::dead, "worse", 2500), 2500);
  EXPECT_EQ(field("P", "s"), "ready");
  EXPECT_EQ(status("fP", "dead"), "2");
  auto page = show("fP");
  std::map<std::string, std::string> errors;
  for (size_t i = 13; i + 3 < page.size(); i += 4) errors[page[i]] = page[i + 3];
  EXPECT_EQ(errors["K"], "worse");
  expect_books_balance();
}

TEST_F(Groups, AChildThatRetriesDoesNotSettle) {
  ASSERT_EQ(put(flow({member("P"), member("A", 1, ChildFailure::fail_parent)}), 1000).code, calls::GroupEnqueued::accepted);
  promote(1000);
  auto leased = lease_all(9000);
  EXPECT_EQ(nack(leased.at("A"), NackMode::retry, "again", 2000), -1);  // 1 of 3 attempts
  EXPECT_EQ(field("P", "s"), "held");
  EXPECT_EQ(status("fP", "pending"), "1");
}

TEST_F(Groups, AChildWhoseLastLeaseRunsOutFailsItsParent) {
  auto one_attempt = member("A", 1, ChildFailure::fail_parent);
  one_attempt.job.max_attempts = 1;
  ASSERT_EQ(put(flow({member("P"), one_attempt}), 1000).code, calls::GroupEnqueued::accepted);
  promote(1000);
  auto leased = lease_all(5000);
  record_start({leased.at("A")}, 5000);
  Round reclaim;
  reclaim.add(calls::reclaim("q", 6000, 100, 60));
  auto r = calls::parse_reclaim(run(reclaim));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->dead, 1);
  EXPECT_EQ(field("P", "s"), "dead");
  EXPECT_NE(field("P", "e").find("child A dead: attempts exhausted"), std::string::npos) << field("P", "e");
  expect_books_balance();
}

TEST_F(Groups, CancellingAParentCancelsItsWaitingDescendantsButNotARunningOne) {
  ASSERT_EQ(put(flow({member("P"), member("R", 1, ChildFailure::fail_parent), member("Q", 1, ChildFailure::fail_parent, 90'000),
                      member("N", 1, ChildFailure::ignore), member("NC", 4, ChildFailure::ignore, 90'000)}),
                1000)
                .code,
            calls::GroupEnqueued::accepted);
  EXPECT_EQ(promote(1000), 0);  // R is ready; Q and NC are due later, N waits for NC
  auto leased = lease_all(9000);
  ASSERT_TRUE(leased.contains("R"));
  EXPECT_EQ(cancel("P", 2000).status, CancelStatus::cancelled);
  EXPECT_EQ(field("P", "s"), "cancelled");
  EXPECT_EQ(field("Q", "s"), "cancelled");
  EXPECT_EQ(field("N", "s"), "cancelled");
  EXPECT_EQ(field("NC", "s"), "cancelled");
  EXPECT_EQ(field("R", "s"), "leased");
  EXPECT_EQ(status("fP", "state"), "cancelled");
  EXPECT_EQ(status("fN", "state"), "cancelled");
  EXPECT_EQ(ack(leased, {"R"}, 3000), -1);  // runs to its end; the cancelled group counts nothing more
  EXPECT_EQ(status("fP", "done"), "0");
  expect_books_balance();
}

TEST_F(Groups, CancellingAChildTellsItsParent) {
  ASSERT_EQ(put(flow({member("P"), member("A", 1, ChildFailure::fail_parent, 90'000)}), 1000).code,
            calls::GroupEnqueued::accepted);
  EXPECT_EQ(cancel("A", 2000).status, CancelStatus::cancelled);
  EXPECT_EQ(field("P", "s"), "dead");
  EXPECT_EQ(field("P", "e"), "child A cancelled");
  ASSERT_EQ(put(flow({member("P2"), member("B", 1, ChildFailure::ignore, 90'000)}), 1000).code, calls::GroupEnqueued::accepted);
  EXPECT_EQ(cancel("B", 3000).released_due_ms, 3000);
  EXPECT_EQ(field("P2", "s"), "ready");
  expect_books_balance();
}

TEST_F(Groups, AFlowWithAKnownIdIsRefusedWholeAndWritesNothing) {
  enqueue({job("B")}, 1000);
  auto out = put(flow({member("P"), member("A", 1, ChildFailure::fail_parent), member("B", 1, ChildFailure::fail_parent)}), 1000);
  EXPECT_EQ(out.code, calls::GroupEnqueued::duplicate);
  EXPECT_EQ(out.job_number, 3);
  EXPECT_EQ(field("P", "s"), "");
  EXPECT_EQ(field("A", "s"), "");
  EXPECT_TRUE(show("fP").empty());
  // The same id twice in one flow, too.
  EXPECT_EQ(put(flow({member("X"), member("X", 1, ChildFailure::ignore)}), 1000).code, calls::GroupEnqueued::duplicate);
  // A retry of a stored flow is a duplicate of its first job.
  ASSERT_EQ(put(flow({member("F"), member("F1", 1, ChildFailure::ignore)}), 1000).code, calls::GroupEnqueued::accepted);
  EXPECT_EQ(put(flow({member("F"), member("F1", 1, ChildFailure::ignore)}), 1000).job_number, 1);
  expect_books_balance();
}

TEST_F(Groups, AFlowPastTheBacklogIsRefusedWhole) {
  enqueue({job("a"), job("b")}, 1000);
  EXPECT_EQ(put(flow({member("P"), member("A", 1, ChildFailure::ignore)}), 1000, 3).code, calls::GroupEnqueued::backlog_full);
  EXPECT_EQ(field("P", "s"), "");
  EXPECT_EQ(put(flow({member("P")}), 1000, 3).code, calls::GroupEnqueued::accepted);
}

TEST_F(Groups, BadShapesAreRefusedWithAClearError) {
  auto too_deep = flow({member("1"), member("2", 1, ChildFailure::ignore), member("3", 2, ChildFailure::ignore),
                        member("4", 3, ChildFailure::ignore), member("5", 4, ChildFailure::ignore)});
  EXPECT_NE(put_error(too_deep, 1000).find("deeper than 4 levels"), std::string::npos);
  EXPECT_NE(put_error(flow({member("1", 2, ChildFailure::ignore), member("2")}), 1000).find("parent that is not a job before it"),
            std::string::npos);
  EXPECT_NE(put_error(flow({member("1"), member("2", 1)}), 1000).find("policy"), std::string::npos);
  EXPECT_NE(put_error(flow({member("1", 0, ChildFailure::none, 0, GroupRole::on_success)}), 1000).find("callback"),
            std::string::npos);
  // The C++ check says the same before a call is built.
  EXPECT_TRUE(group_problem(too_deep));
  EXPECT_EQ(group_problem(too_deep)->job_index, 4);
  EXPECT_FALSE(group_problem(flow({member("1"), member("2", 1, ChildFailure::ignore)})));
  EXPECT_EQ(field("1", "s"), "");
}

TEST_F(Groups, ABatchReleasesItsCallbacksOnceClosedAndSettled) {
  ASSERT_EQ(put(batch("B1", BatchAction::open, false,
                      {member("ok", 0, ChildFailure::none, 0, GroupRole::on_success),
                       member("all", 0, ChildFailure::none, 0, GroupRole::on_complete), member("m1"), member("m2")}),
                1000)
                .code,
            calls::GroupEnqueued::accepted);
  EXPECT_EQ(field("ok", "s"), "held");
  EXPECT_EQ(field("m1", "gb"), "B1");
  ASSERT_EQ(put(batch("B1", BatchAction::add, false, {member("m3")}), 1000).code, calls::GroupEnqueued::accepted);
  EXPECT_EQ(promote(1000), 0);  // the members are ready
  auto leased = lease_all(9000);
  EXPECT_EQ(ack(leased, {"m1", "m2", "m3"}, 2000), -1);  // open: it may take more members
  EXPECT_EQ(status("bB1", "pending"), "0");
  EXPECT_EQ(field("ok", "s"), "held");
  auto closed = put(batch("B1", BatchAction::add, true, {}), 3000);
  EXPECT_EQ(closed.code, calls::GroupEnqueued::accepted);
  EXPECT_EQ(closed.released_due_ms, 3000);
  EXPECT_EQ(field("ok", "s"), "ready");
  EXPECT_EQ(field("all", "s"), "ready");
  EXPECT_EQ(status("bB1", "total"), "3");
  EXPECT_EQ(status("bB1", "state"), "settled");
  EXPECT_EQ(put(batch("B1", BatchAction::add, false, {member("m4")}), 3000).code, calls::GroupEnqueued::batch_closed);
  // The closing request resent (its answer lost): a duplicate, not refused.
  EXPECT_EQ(put(batch("B1", BatchAction::add, false, {member("m3")}), 3000).code, calls::GroupEnqueued::duplicate);
  EXPECT_EQ(put(batch("B1", BatchAction::add, true, {}), 3000).code, calls::GroupEnqueued::batch_closed);
  EXPECT_EQ(put(batch("B9", BatchAction::add, false, {member("m5")}), 3000).code, calls::GroupEnqueued::no_batch);
  EXPECT_EQ(put(batch("B1", BatchAction::open, false, {member("m6")}), 3000).code, calls::GroupEnqueued::batch_exists);
  EXPECT_EQ(field("m4", "s"), "");
  expect_books_balance();
}

TEST_F(Groups, ABatchWithAFailedMemberCancelsItsSuccessCallbackAndRunsItsCompleteOne) {
  ASSERT_EQ(put(batch("B2", BatchAction::open, true,
                      {member("ok", 0, ChildFailure::none, 0, GroupRole::on_success),
                       member("all", 0, ChildFailure::none, 0, GroupRole::on_complete), member("m1"), member("m2")}),
                1000)
                .code,
            calls::GroupEnqueued::accepted);
  promote(1000);
  auto leased = lease_all(9000);
  EXPECT_EQ(nack(leased.at("m1"), NackMode::dead, "no", 2000), -1);
  EXPECT_EQ(ack(leased, {"m2"}, 3000), 3000);  // the last member: the step releases the callbacks
  EXPECT_EQ(field("ok", "s"), "cancelled");
  EXPECT_EQ(field("all", "s"), "ready");
  EXPECT_EQ(status("bB2", "dead"), "1");
  EXPECT_EQ(status("bB2", "done"), "1");
  expect_books_balance();
}

TEST_F(Groups, ABatchTakesNoMoreThanItsMostMembersAndAFullOneStoresNothing) {
  ASSERT_EQ(put(batch("B", BatchAction::open, false, {member("m1"), member("m2")}), 1000, 0, 3).code,
            calls::GroupEnqueued::accepted);
  EXPECT_EQ(put(batch("B", BatchAction::add, false, {member("m3"), member("m4")}), 1000, 0, 3).code,
            calls::GroupEnqueued::batch_full);
  EXPECT_EQ(field("m3", "s"), "");
  EXPECT_EQ(put(batch("B", BatchAction::add, false, {member("m3")}), 1000, 0, 3).code, calls::GroupEnqueued::accepted);
  EXPECT_EQ(status("bB", "total"), "3");
  EXPECT_EQ(put(batch("C", BatchAction::open, false, {member("c1"), member("c2")}), 1000, 0, 1).code,
            calls::GroupEnqueued::batch_full);
  EXPECT_TRUE(show("bC").empty());
  expect_books_balance();
}

TEST_F(Groups, AFlowsRootJoinsABatchAndSettlesItWhenTheRootDoes) {
  ASSERT_EQ(put(batch("B", BatchAction::open, true,
                      {member("cb", 0, ChildFailure::none, 0, GroupRole::on_complete), member("root"),
                       member("leaf", 2, ChildFailure::fail_parent)}),
                1000)
                .code,
            calls::GroupEnqueued::accepted);
  EXPECT_EQ(field("root", "gb"), "B");
  EXPECT_EQ(field("leaf", "gp"), "root");
  EXPECT_EQ(status("bB", "total"), "1");
  EXPECT_EQ(field("leaf", "s"), "ready");
  EXPECT_EQ(ack(lease_all(9000), {"leaf"}, 2000), 2000);  // releases the root
  EXPECT_EQ(field("cb", "s"), "held");
  EXPECT_EQ(field("root", "s"), "ready");
  EXPECT_EQ(ack(lease_all(9000), {"root"}, 3000), 3000);  // settles the batch
  EXPECT_EQ(field("cb", "s"), "ready");
  expect_books_balance();
}

TEST_F(Groups, ABatchOpensEmptyTakesMembersLaterAndAnEmptyAddIsRefused) {
  ASSERT_EQ(put(batch("E", BatchAction::open, false, {}), 1000).code, calls::GroupEnqueued::accepted);
  EXPECT_EQ(status("bE", "state"), "waiting");
  EXPECT_EQ(status("bE", "total"), "0");
  EXPECT_NE(put_error(batch("E", BatchAction::add, false, {}), 1000).find("bad-args"), std::string::npos);
  EXPECT_EQ(put(batch("E", BatchAction::add, true, {member("e1")}), 1000).code, calls::GroupEnqueued::accepted);
  EXPECT_EQ(status("bE", "total"), "1");
  EXPECT_EQ(status("bE", "open"), "0");
}

TEST_F(Groups, ClosingAnEmptyBatchReleasesItsCallbacksAtOnce) {
  ASSERT_EQ(put(batch("B3", BatchAction::open, true, {member("ok", 0, ChildFailure::none, 0, GroupRole::on_success)}), 1000)
                .released_due_ms,
            1000);
  EXPECT_EQ(field("ok", "s"), "ready");
}

// A fair queue's ready set is ordered by the tags promote gives: a parent
// released there goes through the schedule, due now.
TEST_F(Groups, InAFairQueueAReleasedParentIsDueNowAndPromoteGivesItItsTag) {
  redis_->cli("SET 'dueq:{q}:fair' 1000");  // as lease.lua keeps it while the queue is fair
  ASSERT_EQ(put(flow({member("P"), member("A", 1, ChildFailure::ignore)}), 1000).code, calls::GroupEnqueued::accepted);
  EXPECT_EQ(field("A", "s"), "scheduled") << "due now, through the schedule for its tag";
  Round first;
  first.add(calls::promote("q", 1000, 1000, true));
  EXPECT_EQ(calls::parse_promote(run(first))->moved, 1);
  auto leased = lease_all(9000);
  redis_->cli("SET 'dueq:{q}:fair' 1000");  // this test's lease was not fair and took it away
  EXPECT_EQ(ack(leased, {"A"}, 2000), 2000);
  EXPECT_EQ(field("P", "s"), "scheduled");
  EXPECT_EQ(field("P", "r"), "2000");
  Round fair_promote;
  fair_promote.add(calls::promote("q", 2000, 1000, true));
  EXPECT_EQ(calls::parse_promote(run(fair_promote))->moved, 1);
  EXPECT_EQ(field("P", "s"), "ready");
  expect_books_balance();
}

TEST_F(Groups, AHeldJobCannotBeRescheduledAndKeepsWaiting) {
  ASSERT_EQ(put(flow({member("P"), member("A", 1, ChildFailure::ignore, 90'000)}), 1000).code, calls::GroupEnqueued::accepted);
  Round round;
  round.add(calls::reschedule("q", 2000, 2000, {"P"}));
  auto moved = ints(run(round));
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->at(0), 0);
  EXPECT_EQ(field("P", "s"), "held");
  EXPECT_EQ(promote(3000), 0);
}

TEST_F(Groups, ASettledGroupIsForgottenWithTheDoneJobsAndAnOpenBatchIsKept) {
  ASSERT_EQ(put(flow({member("P"), member("A", 1, ChildFailure::ignore)}), 1000).code, calls::GroupEnqueued::accepted);
  ASSERT_EQ(put(batch("open", BatchAction::open, false, {member("m")}), 1000).code, calls::GroupEnqueued::accepted);
  promote(1000);
  auto leased = lease_all(9000);
  ack(leased, {"A", "m"}, 2000);  // the flow settles at 2000; the batch is open
  Round early;
  early.add(calls::sweep("q", 2000, 100, 1000, 2000));
  auto kept = calls::parse_sweep(run(early));
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->groups_removed, 0);
  EXPECT_EQ(kept->earliest_finish_ms, 2000);
  EXPECT_EQ(status("fP", "state"), "settled");
  Round late;
  late.add(calls::sweep("q", 2001, 100, 1000, 2001));
  auto swept = calls::parse_sweep(run(late));
  ASSERT_TRUE(swept);
  EXPECT_EQ(swept->groups_removed, 1);
  EXPECT_TRUE(show("fP").empty());
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:groups:m:fP'"), "0");
  EXPECT_EQ(status("bopen", "state"), "waiting");
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:groups:m:bopen'"), "1");
}

TEST_F(Groups, DeletingAnEmptyQueueTakesItsGroupsWithIt) {
  ASSERT_EQ(put(batch("b", BatchAction::open, false, {member("m")}), 1000).code, calls::GroupEnqueued::accepted);
  promote(1000);
  ack(lease_all(9000), {"m"}, 2000);
  Round del;
  del.add(calls::delete_queue("q"));
  auto outcome = calls::parse_delete_queue(run(del));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->status, DeleteQueueStatus::deleted);
  EXPECT_EQ(redis_->cli("KEYS 'dueq:{q}:groups*'"), "");
}

}  // namespace
}  // namespace dueq::testing::scripts
