#pragma once
// How large a share of Redis's time background work (admin requests, the
// reconciler's audits) may take, by how busy the event loop keeps Redis:
// the quiet share while the loop sends at most `quiet_commands` a window,
// and above that less in inverse proportion to the loop's rate, never under
// the floor. A search of an idle broker need not leave most of Redis to a
// loop with nothing to do; with jobs flowing, every share of Redis the
// background takes is queueing delay for the loop's rounds (20,000 jobs a
// second beside a storm of searches: p99 1.25 x at a fifth, 1.07 x at a
// twentieth), so it yields. The moment the loop's commands pass the quiet
// count within a window, the share follows.
#include <algorithm>
#include <chrono>
#include <cstdint>

namespace dueq::broker {

class BackgroundShare {
 public:
  using Clock = std::chrono::steady_clock;

  struct Settings {
    double quiet = 0.5;
    double floor = 0.05;
    // The loop is quiet while it sends at most this many commands a window.
    uint64_t quiet_commands = 10;
    Clock::duration window = std::chrono::milliseconds(100);
  };

  explicit BackgroundShare(Settings settings) : settings_(settings), share_(settings.floor) {}

  // The share for a loop sending `per_window` commands a window.
  double share_for(double per_window) const {
    const auto quiet = static_cast<double>(settings_.quiet_commands);
    if (per_window <= quiet) return settings_.quiet;
    return std::max(settings_.floor, settings_.quiet * quiet / per_window);
  }

  // The share for the pause that follows a call ending at `now`, when the
  // loop has sent `sent` commands in all. Until a window has shown the
  // loop's rate, the floor: a broker just started has not seen its loop.
  double at(Clock::time_point now, uint64_t sent) {
    if (!started_) {
      started_ = true;
      window_start_ = now;
      sent_at_start_ = sent;
      return share_;
    }
    const auto elapsed = now - window_start_;
    const auto in_window = static_cast<double>(sent - sent_at_start_);
    // Busy before the window is out: its rate so far, over at least a
    // tenth of it. A call may also come long after the last: the rate over
    // all that time.
    if (elapsed < settings_.window && in_window <= static_cast<double>(settings_.quiet_commands)) return share_;
    const auto over = std::max(elapsed, settings_.window / 10);
    share_ = share_for(in_window * static_cast<double>(settings_.window.count()) / static_cast<double>(over.count()));
    window_start_ = now;
    sent_at_start_ = sent;
    return share_;
  }

 private:
  Settings settings_;
  double share_;
  bool started_ = false;
  Clock::time_point window_start_{};
  uint64_t sent_at_start_ = 0;
};

}  // namespace dueq::broker
