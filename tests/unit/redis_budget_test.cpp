#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "broker/store/redis_budget.hpp"

using namespace dueq::broker;
using namespace std::chrono_literals;

// Rule: the admin thread and the reconciler share one budget of Redis's
// time: their calls take turns (never two at once), so together they take
// no more than one holder would.
TEST(RedisBudget, CallsOfAllItsHoldersTakeTurns) {
  RedisBudget budget(0.5);
  std::atomic<int> calling{0}, most_at_once{0}, calls{0};
  auto holder = [&] {
    for (int i = 0; i < 200; ++i) {
      const RedisBudget::Turn turn(&budget);
      const int now = ++calling;
      int seen = most_at_once.load();
      while (now > seen && !most_at_once.compare_exchange_weak(seen, now)) {}
      std::this_thread::sleep_for(20us);  // the call to Redis
      --calling;
      ++calls;
    }
  };
  std::vector<std::thread> holders;
  for (int i = 0; i < 3; ++i) holders.emplace_back(holder);
  for (auto& t : holders) t.join();
  EXPECT_EQ(calls.load(), 600);
  EXPECT_EQ(most_at_once.load(), 1);
}

// Rule: a call and the pause after it take spent / share: at a fifth,
// a 1 ms call is followed by 4 ms without background calls.
TEST(RedisBudget, ThePauseAfterACallKeepsTheShare) {
  auto us = [](auto d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
  EXPECT_NEAR(static_cast<double>(us(RedisBudget::pause_after(1ms, 0.2))), 4'000, 1);
  EXPECT_NEAR(static_cast<double>(us(RedisBudget::pause_after(3ms, 0.5))), 3'000, 1);
  EXPECT_EQ(us(RedisBudget::pause_after(7ms, 1.0)), 0);
}

namespace {

using Share = BackgroundShare;
const Share::Settings kShare{.quiet = 0.5, .floor = 0.05, .quiet_commands = 50, .window = 100ms};
const Share::Clock::time_point kT0{};

}  // namespace

// Rule: half of Redis while the loop sends at most the quiet count a
// window; above it, less in inverse proportion to the loop's rate; never
// under the floor.
TEST(BackgroundShare, TheShareFallsAsTheLoopSendsMore) {
  const Share share(kShare);
  EXPECT_EQ(share.share_for(0), 0.5);
  EXPECT_EQ(share.share_for(50), 0.5);
  EXPECT_DOUBLE_EQ(share.share_for(125), 0.2);
  EXPECT_DOUBLE_EQ(share.share_for(250), 0.1);
  EXPECT_DOUBLE_EQ(share.share_for(500), 0.05);
  EXPECT_DOUBLE_EQ(share.share_for(2'000), 0.05);
}

// Rule: until a whole window has shown the loop's rate, background work
// takes the floor: a broker just started has not seen its loop yet.
TEST(BackgroundShare, TheFirstWindowTakesTheFloor) {
  Share share(kShare);
  EXPECT_EQ(share.at(kT0, 0), 0.05);
  EXPECT_EQ(share.at(kT0 + 50ms, 10), 0.05);
  EXPECT_EQ(share.at(kT0 + 99ms, 10), 0.05);
}

// Rule: a window in which the loop sent at most the quiet count makes the
// share the quiet one, and it stays while the loop stays quiet.
TEST(BackgroundShare, AQuietWindowRaisesTheShare) {
  Share share(kShare);
  share.at(kT0, 1'000);
  EXPECT_EQ(share.at(kT0 + 100ms, 1'050), 0.5);
  EXPECT_EQ(share.at(kT0 + 150ms, 1'060), 0.5);
  EXPECT_EQ(share.at(kT0 + 250ms, 1'100), 0.5);
}

// Rule: the loop's commands passing the quiet count within a window bring
// the share down at once, by the rate so far, not at the window's end.
TEST(BackgroundShare, TheLoopGettingBusyLowersTheShareAtOnce) {
  Share share(kShare);
  share.at(kT0, 0);
  ASSERT_EQ(share.at(kT0 + 100ms, 5), 0.5);
  EXPECT_DOUBLE_EQ(share.at(kT0 + 150ms, 130), 0.1);  // 125 in 50 ms: 250 a window
  // and the rest of that window does not count as quiet
  EXPECT_DOUBLE_EQ(share.at(kT0 + 200ms, 150), 0.1);
  EXPECT_EQ(share.at(kT0 + 251ms, 170), 0.5);  // 40 since 150 ms
  // a burst within the first tenth of a window is taken over that tenth
  EXPECT_DOUBLE_EQ(share.at(kT0 + 252ms, 270), 0.05);
}

// Rule: after a long gap between background calls, the loop's rate over
// the whole gap decides (not its count against one window's).
TEST(BackgroundShare, AfterALongGapTheRateOverTheGapDecides) {
  Share share(kShare);
  share.at(kT0, 0);
  EXPECT_EQ(share.at(kT0 + 10s, 300), 0.5);                 // 3 a window
  EXPECT_DOUBLE_EQ(share.at(kT0 + 20s, 25'300), 0.1);  // 250 a window
}

// Rule: a budget made with one share keeps it whatever the loop does.
TEST(BackgroundShare, OneShareForBothIsOneShare) {
  Share share({.quiet = 0.3, .floor = 0.3});
  share.at(kT0, 0);
  EXPECT_EQ(share.at(kT0 + 1s, 0), 0.3);
  EXPECT_EQ(share.at(kT0 + 2s, 1'000'000), 0.3);
}
