// The worker's bookkeeping without a broker: what it holds, and how a drain
// ends.
#include <gtest/gtest.h>

#include "worker/drain.hpp"
#include "worker/held_jobs.hpp"

namespace dueq::worker {
namespace {

using Step = Drain::Step;

TEST(Drain, ExitsOnceNothingRunsAndTheBrokerConfirmedEveryResult) {
  Drain drain;
  EXPECT_EQ(drain.step(0, true, true), Step::wait);  // not draining
  drain.begin(1'000, 30'000);
  EXPECT_TRUE(drain.active());
  EXPECT_EQ(drain.step(1'000, false, true), Step::wait);  // a handler still runs
  EXPECT_EQ(drain.step(2'000, true, false), Step::wait);  // a result not confirmed
  EXPECT_EQ(drain.step(2'500, true, true), Step::exit);
}

TEST(Drain, ExitsWithoutConfirmationsOnceTheBrokerHadItsWait) {
  Drain drain;
  drain.begin(0, 30'000);
  EXPECT_EQ(drain.step(100, true, false), Step::wait);
  EXPECT_EQ(drain.step(100 + Drain::kConfirmWaitMs - 1, true, false), Step::wait);
  EXPECT_EQ(drain.step(100 + Drain::kConfirmWaitMs, true, false), Step::exit);
}

TEST(Drain, StopsHandlersOnceAtTheTimeoutAndGivesUpOnThemAfterTheGrace) {
  Drain drain;
  drain.begin(0, 10'000);
  EXPECT_EQ(drain.step(9'999, false, true), Step::wait);
  EXPECT_EQ(drain.step(10'000, false, true), Step::stop_handlers);
  EXPECT_EQ(drain.step(10'001, false, true), Step::wait);  // said once
  EXPECT_EQ(drain.step(10'000 + Drain::kCancelGraceMs - 1, false, true), Step::wait);
  EXPECT_EQ(drain.step(10'000 + Drain::kCancelGraceMs, false, true), Step::exit_abandoned);
}

TEST(HeldJobs, AResultEndsItsDeliveryAndWaitsForTheBrokersConfirmation) {
  HeldJobs held;
  held.hold({"q", "a", 7});
  EXPECT_TRUE(held.holds({"q", "a", 7}));
  EXPECT_FALSE(held.holds({"q", "a", 8}));
  held.finished(proto::JobResult{"q", "a", 7, proto::Outcome::done, ""});
  EXPECT_TRUE(held.empty());
  ASSERT_EQ(held.unconfirmed().size(), 1u);
  held.confirmed({"q", "a", 6});  // another delivery's confirmation
  EXPECT_FALSE(held.all_confirmed());
  held.confirmed({"q", "a", 7});
  EXPECT_TRUE(held.all_confirmed());
}

// A delivery arriving again (same token) is known until its result is
// confirmed, so the worker does not start it twice; another token is not.
TEST(HeldJobs, ADeliveryIsKnownWhileHeldAndUntilItsResultIsConfirmed) {
  HeldJobs held;
  EXPECT_FALSE(held.knows({"q", "a", 7}));
  held.hold({"q", "a", 7});
  EXPECT_TRUE(held.knows({"q", "a", 7}));
  EXPECT_FALSE(held.knows({"q", "a", 8}));
  held.finished(proto::JobResult{"q", "a", 7, proto::Outcome::done, ""});
  EXPECT_TRUE(held.knows({"q", "a", 7}));
  EXPECT_FALSE(held.knows({"q", "a", 8}));
  held.confirmed({"q", "a", 7});
  EXPECT_FALSE(held.knows({"q", "a", 7}));
}

TEST(HeldJobs, AStaleDeliveryNeverTouchesTheNewerDeliveryOfTheSameJob) {
  HeldJobs held;
  held.hold({"q", "a", 1});
  held.hold({"q", "a", 2});  // re-leased by the broker
  auto cancel = held.cancel_state({"q", "a", 2});
  held.forget({"q", "a", 1});
  EXPECT_TRUE(held.holds({"q", "a", 2}));
  held.stop_running({"q", "a", 1});
  EXPECT_FALSE(cancel->stop);
  held.stop_running({"q", "a", 2});
  EXPECT_TRUE(cancel->stop);
  EXPECT_TRUE(cancel->by_user);
  ASSERT_EQ(held.refs().size(), 1u);
  EXPECT_EQ(held.refs()[0].token, 2u);
}

TEST(HeldJobs, StopAllAsksEveryHandlerToStopButNotAsTheUsersCancel) {
  HeldJobs held;
  held.hold({"q", "a", 1});
  held.hold({"q", "b", 2});
  auto a = held.cancel_state({"q", "a", 1});
  auto b = held.cancel_state({"q", "b", 2});
  held.stop_all();
  EXPECT_TRUE(a->stop);
  EXPECT_TRUE(b->stop);
  EXPECT_FALSE(a->by_user);
}

}  // namespace
}  // namespace dueq::worker
