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
const Share::Settings kShare{.busy = 0.2, .quiet = 0.5, .quiet_commands = 50, .window = 100ms};
const Share::Clock::time_point kT0{};

}  // namespace

// Rule: until a whole window has shown the loop quiet, background work
// takes the busy share: a broker just started has not seen its loop yet.
TEST(BackgroundShare, TheFirstWindowIsBusy) {
  Share share(kShare);
  EXPECT_EQ(share.at(kT0, 0), 0.2);
  EXPECT_EQ(share.at(kT0 + 50ms, 10), 0.2);
  EXPECT_EQ(share.at(kT0 + 99ms, 10), 0.2);
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
// the busy share back at once, not at the window's end.
TEST(BackgroundShare, TheLoopGettingBusyLowersTheShareAtOnce) {
  Share share(kShare);
  share.at(kT0, 0);
  ASSERT_EQ(share.at(kT0 + 100ms, 5), 0.5);
  EXPECT_EQ(share.at(kT0 + 101ms, 56), 0.2);
  // and a window of it does not count as quiet
  EXPECT_EQ(share.at(kT0 + 150ms, 80), 0.2);
  EXPECT_EQ(share.at(kT0 + 201ms, 100), 0.5);  // 44 since 101 ms
}

// Rule: after a long gap between background calls, the loop's rate over
// the whole gap decides (not its count against one window's).
TEST(BackgroundShare, AfterALongGapTheRateOverTheGapDecides) {
  Share share(kShare);
  share.at(kT0, 0);
  EXPECT_EQ(share.at(kT0 + 10s, 300), 0.5);      // 3 a window
  EXPECT_EQ(share.at(kT0 + 20s, 20'300), 0.2);  // 200 a window
}

// Rule: a budget made with one share keeps it whatever the loop does.
TEST(BackgroundShare, OneShareForBothIsOneShare) {
  Share share({.busy = 0.3, .quiet = 0.3});
  share.at(kT0, 0);
  EXPECT_EQ(share.at(kT0 + 1s, 0), 0.3);
  EXPECT_EQ(share.at(kT0 + 2s, 1'000'000), 0.3);
}
