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
  EXPECT_NEAR(static_cast<double>(us(RedisBudget(0.2).pause_after(1ms))), 4'000, 1);
  EXPECT_NEAR(static_cast<double>(us(RedisBudget(0.5).pause_after(3ms))), 3'000, 1);
  EXPECT_EQ(us(RedisBudget(1.0).pause_after(7ms)), 0);
}
