#pragma once
// How long the broker itself did not listen: stopped (SIGSTOP, a VM
// paused), starved of CPU, or busy past the wait it chose. Its workers'
// frames wait in the socket meanwhile, and a worker that gave the silent
// broker up (it moves to another after three heartbeats) closed its
// connection and took its unread frames with it. Such a worker is not to be
// declared dead, nor its deliveries leased again, for a silence the broker
// caused (Broker::on_own_stall). Pure state: the loop reports when it
// starts to wait (and for how long it means to) and when it wakes.
#include <algorithm>
#include <cstdint>

namespace dueq::broker {

class StallWatch {
 public:
  // Deafness shorter than `threshold_ms` is the loop's ordinary work.
  explicit StallWatch(int64_t threshold_ms) : threshold_ms_(threshold_ms) {}

  // The loop starts to wait at `now_ms`, for at most `wait_ms`.
  void waiting(int64_t now_ms, int64_t wait_ms) {
    working_ms_ = woke_ms_ < 0 ? 0 : now_ms - woke_ms_;
    waiting_since_ms_ = now_ms;
    wait_ms_ = std::max<int64_t>(0, wait_ms);
  }

  // The loop woke at `now_ms`: how long it did not listen since it last
  // woke, beyond the waits it chose, if that reaches the threshold; else 0.
  int64_t woke(int64_t now_ms) {
    const int64_t overslept = std::max<int64_t>(0, now_ms - waiting_since_ms_ - wait_ms_);
    woke_ms_ = now_ms;
    const int64_t deaf = working_ms_ + overslept;
    return deaf >= threshold_ms_ ? deaf : 0;
  }

 private:
  int64_t threshold_ms_;
  int64_t woke_ms_ = -1;
  int64_t working_ms_ = 0;
  int64_t waiting_since_ms_ = 0;
  int64_t wait_ms_ = 0;
};

}  // namespace dueq::broker
