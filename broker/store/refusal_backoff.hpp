#pragma once
// Redis refusing the broker's scripts (OOM, NOREPLICAS, MISCONF, READONLY, a
// script error) is no reason to ask again at once: every turn would send the
// same calls and log the same line, burning a core on both sides. One
// back-off for all of the broker's writes (promote, lease, reclaim, sweep,
// ack, nack): these refusals are about the server, not one queue. The one
// exception is a queue whose Redis Cluster slot is moving to another master
// (its scripts answer TRYAGAIN or ASK, lua/lib/fence.lua): only that queue's
// calls wait, kSlotMovingMs at a time, until the slot has moved.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

class RefusalBackoff {
 public:
  static constexpr int64_t kFirstMs = 100;
  static constexpr int64_t kMaxMs = 5'000;
  static constexpr int64_t kLogIntervalMs = 10'000;
  static constexpr int64_t kSlotMovingMs = 50;

  explicit RefusalBackoff(const Clock& clock) : clock_(clock) {}

  // Calls wait: the last one was refused less than the back-off ago.
  bool holding() const { return clock_.steady_ms() < retry_at_ms_; }
  // Calls on `queue` wait: the server's, or the queue's slot is moving.
  bool holding(const std::string& queue) const;
  // Microseconds until calls may go again; -1 when none wait.
  int64_t us_until_retry() const;
  // Redis refused `what` (a script name and queue) on `queue` with `error`:
  // the back-off doubles (100 ms to 5 s); one line per 10 s says how many
  // were refused. A moving slot holds `queue` alone.
  void refused(const std::string& queue, std::string_view what, std::string_view error);
  // A write went through: the next refusal starts from the first back-off.
  void succeeded() { backoff_ms_ = 0; }
  // The last write was refused.
  bool refusing() const { return backoff_ms_ > 0; }
  int64_t backoff_ms() const { return backoff_ms_; }

 private:
  const Clock& clock_;
  int64_t backoff_ms_ = 0;
  int64_t retry_at_ms_ = 0;
  LogLimiter log_{kLogIntervalMs, 1, 1};
  std::unordered_map<std::string, int64_t> moving_until_ms_;  // queue -> steady ms; at most one per queue
  LogLimiter moving_log_{kLogIntervalMs, 1, 1'024};
};

}  // namespace dueq::broker
