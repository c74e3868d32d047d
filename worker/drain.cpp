#include "worker/drain.hpp"

namespace dueq::worker {

Drain::Step Drain::step(int64_t now_ms, bool idle, bool all_confirmed) {
  if (!active_) return Step::wait;
  if (idle) {
    if (idle_since_ms_ < 0) idle_since_ms_ = now_ms;
    return all_confirmed || now_ms - idle_since_ms_ >= kConfirmWaitMs ? Step::exit : Step::wait;
  }
  if (now_ms >= deadline_ms_ && !handlers_stopped_) {
    handlers_stopped_ = true;
    return Step::stop_handlers;
  }
  if (now_ms >= deadline_ms_ + kCancelGraceMs) return Step::exit_abandoned;
  return Step::wait;
}

}  // namespace dueq::worker
