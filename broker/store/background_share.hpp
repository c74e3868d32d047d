#pragma once
// How large a share of Redis's time background work (admin requests, the
// reconciler's audits) may take: the busy share while the event loop sends
// Redis work, the quiet share while it sends next to nothing. A search of an
// idle broker need not leave four fifths of Redis to a loop with nothing to
// do; the moment the loop's commands pass the quiet rate within a window,
// the busy share is back, so jobs flowing never wait behind more than it.
#include <chrono>
#include <cstdint>

namespace dueq::broker {

class BackgroundShare {
 public:
  using Clock = std::chrono::steady_clock;

  struct Settings {
    double busy = 0.2;
    double quiet = 0.5;
    // The loop is quiet while it sends at most this many commands a window.
    uint64_t quiet_commands = 50;
    Clock::duration window = std::chrono::milliseconds(100);
  };

  explicit BackgroundShare(Settings settings) : settings_(settings) {}

  // The share for the pause that follows a call ending at `now`, when the
  // loop has sent `sent` commands in all. The first window is busy: a
  // broker just started, or a share just made, has not seen the loop yet.
  double at(Clock::time_point now, uint64_t sent) {
    if (!started_) {
      started_ = true;
      window_start_ = now;
      sent_at_start_ = sent;
      return settings_.busy;
    }
    const auto elapsed = now - window_start_;
    const auto in_window = static_cast<double>(sent - sent_at_start_);
    if (elapsed < settings_.window) {
      if (in_window <= static_cast<double>(settings_.quiet_commands)) return quiet_ ? settings_.quiet : settings_.busy;
      quiet_ = false;  // busy before the window is out
    } else {
      // A call may come long after the last: the rate over all that time.
      quiet_ = in_window * static_cast<double>(settings_.window.count()) <=
               static_cast<double>(settings_.quiet_commands) * static_cast<double>(elapsed.count());
    }
    window_start_ = now;
    sent_at_start_ = sent;
    return quiet_ ? settings_.quiet : settings_.busy;
  }

 private:
  Settings settings_;
  bool started_ = false;
  bool quiet_ = false;
  Clock::time_point window_start_{};
  uint64_t sent_at_start_ = 0;
};

}  // namespace dueq::broker
