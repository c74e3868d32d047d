#pragma once
// How long the broker itself did not run while it should have listened:
// stopped (SIGSTOP, a VM paused) or starved of CPU. Its workers' frames wait
// in the socket meanwhile, and a worker that gave the silent broker up (it
// moves to another after three heartbeats) closed its connection and took
// its unread frames with it. Such a worker is not to be declared dead, nor
// its deliveries leased again, for a silence the broker caused
// (Broker::on_own_stall). Time the broker spends working (its thread's CPU
// time) is not counted: a broker busy with a flood still reads every frame
// in turn, and a worker silent meanwhile is silent. Pure state: the loop
// reports when it starts to wait (and for how long it means to) and when
// it wakes, each with the steady clock and its thread's CPU time.
#include <algorithm>
#include <cstdint>

namespace dueq::broker {

class StallWatch {
 public:
  // Stalls shorter than `threshold_ms` are not reported.
  explicit StallWatch(int64_t threshold_ms) : threshold_ms_(threshold_ms) {}

  // The loop starts to wait at `now_ms`, for at most `wait_ms`; `cpu_ms()`
  // reads its thread's CPU time (a system call: asked only when the time
  // since it woke could hold a stall).
  template <typename CpuMs>
  void waiting(int64_t now_ms, CpuMs cpu_ms, int64_t wait_ms) {
    idle_ms_ = woke_ms_ < 0 || now_ms - woke_ms_ < threshold_ms_
                   ? 0
                   : std::max<int64_t>(0, (now_ms - woke_ms_) - (cpu_ms() - woke_cpu_ms_));
    waiting_since_ms_ = now_ms;
    wait_ms_ = std::max<int64_t>(0, wait_ms);
  }

  // The loop woke at `now_ms`: how long it did not run since it last woke,
  // apart from the waits it chose, if that reaches the threshold; else 0.
  // The CPU time is read at most once a millisecond (a reading up to 1 ms
  // old counts at most 1 ms of work as idle time not seen).
  template <typename CpuMs>
  int64_t woke(int64_t now_ms, CpuMs cpu_ms) {
    const int64_t overslept = std::max<int64_t>(0, now_ms - waiting_since_ms_ - wait_ms_);
    if (now_ms != woke_ms_) woke_cpu_ms_ = cpu_ms();
    woke_ms_ = now_ms;
    const int64_t stalled = idle_ms_ + overslept;
    return stalled >= threshold_ms_ ? stalled : 0;
  }

 private:
  int64_t threshold_ms_;
  int64_t woke_ms_ = -1, woke_cpu_ms_ = 0;
  int64_t idle_ms_ = 0;  // between waking and waiting: wall time the thread did not run
  int64_t waiting_since_ms_ = 0;
  int64_t wait_ms_ = 0;
};

}  // namespace dueq::broker
