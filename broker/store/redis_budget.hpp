#pragma once
// One share of Redis's time for the background work of several threads
// (admin requests, the reconciler's audits): their synchronous calls take
// turns, and after each one the next waits so that together they keep Redis
// busy at most `share` of the time. Each call is bounded, so the event
// loop's rounds wait behind at most one of them. The share falls as the
// loop keeps Redis busier (broker/store/background_share.hpp): the loop's
// client counts the commands it sends here.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "broker/store/background_share.hpp"

namespace dueq::broker {

class RedisBudget {
 public:
  using Clock = std::chrono::steady_clock;

  // One share whatever the loop does.
  explicit RedisBudget(double share) : share_({.quiet = share, .floor = share}) {}
  explicit RedisBudget(BackgroundShare::Settings share) : share_(share) {}

  // The pause after a call that kept Redis busy `spent`: the call and its
  // pause take spent / share.
  static Clock::duration pause_after(Clock::duration spent, double share) {
    return std::chrono::duration_cast<Clock::duration>(spent * (1.0 / share - 1.0));
  }

  // The event loop's client: `n` more commands sent (any thread).
  void count_loop_commands(uint64_t n) { loop_commands_.fetch_add(n, std::memory_order_relaxed); }

  // A call in progress: begun when no other call of the budget is, and the
  // pause after the last one is over; ended (and the next pause set) when
  // it goes out of scope.
  class Turn {
   public:
    explicit Turn(RedisBudget* budget) : budget_(budget) {
      if (budget_ != nullptr) start_ = budget_->begin();
    }
    ~Turn() {
      if (budget_ != nullptr) budget_->end(start_);
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    RedisBudget* budget_;
    Clock::time_point start_{};
  };

 private:
  Clock::time_point begin() {
    std::unique_lock lock(mutex_);
    while (calling_ || Clock::now() < next_call_) {
      if (calling_) turn_.wait(lock);
      else turn_.wait_until(lock, next_call_);
    }
    calling_ = true;
    return Clock::now();
  }
  void end(Clock::time_point start) {
    {
      std::lock_guard lock(mutex_);
      const auto now = Clock::now();
      calling_ = false;
      next_call_ = now + pause_after(now - start, share_.at(now, loop_commands_.load(std::memory_order_relaxed)));
    }
    turn_.notify_all();
  }

  std::atomic<uint64_t> loop_commands_{0};
  std::mutex mutex_;
  BackgroundShare share_;  // guarded by mutex_
  std::condition_variable turn_;
  bool calling_ = false;
  Clock::time_point next_call_{};
};

}  // namespace dueq::broker
