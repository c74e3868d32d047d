#pragma once
// How a worker stops (SIGTERM, Worker::stop): it takes no new jobs and
// hands back those not started (BYE); running ones get drain_timeout to
// finish, are then asked to stop, and get kCancelGraceMs more to return.
// Once nothing runs it exits when the broker has confirmed every result,
// or kConfirmWaitMs later if it does not (down): their leases then expire
// and Redis gives the jobs back. Steady clock, injected by the caller.
#include <cstdint>

namespace dueq::worker {

class Drain {
 public:
  static constexpr int64_t kConfirmWaitMs = 2'000;
  static constexpr int64_t kCancelGraceMs = 5'000;

  enum class Step {
    wait,            // keep running the loop
    stop_handlers,   // drain_timeout passed: ask every running handler to stop (said once)
    exit,            // done: every result confirmed, or the wait for the broker is over
    exit_abandoned,  // handlers ignored the request to stop: exit without their results
  };

  void begin(int64_t now_ms, int64_t timeout_ms) {
    active_ = true;
    deadline_ms_ = now_ms + timeout_ms;
  }
  bool active() const { return active_; }
  // `idle`: no handler runs and nothing is held; `all_confirmed`: the broker
  // confirmed every result sent.
  Step step(int64_t now_ms, bool idle, bool all_confirmed);

 private:
  bool active_ = false;
  bool handlers_stopped_ = false;
  int64_t deadline_ms_ = 0;
  int64_t idle_since_ms_ = -1;
};

}  // namespace dueq::worker
