#include "cli/top_command.hpp"

#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/output.hpp"
#include "common/clock.hpp"
#include "common/json_bytes.hpp"

namespace dueq::cli {

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

// Keys are read one at a time without echo while the view runs; the
// terminal's settings come back on exit.
class RawKeys {
 public:
  RawKeys() {
    if (::isatty(0) == 0 || ::tcgetattr(0, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = ::tcsetattr(0, TCSANOW, &raw) == 0;
  }
  ~RawKeys() {
    if (active_) ::tcsetattr(0, TCSANOW, &saved_);
  }
  RawKeys(const RawKeys&) = delete;
  RawKeys& operator=(const RawKeys&) = delete;

  // Waits up to `ms` for a key; true when it was q.
  bool quit_within(int64_t ms) const {
    pollfd in{0, POLLIN, 0};
    if (!active_) {
      ::poll(nullptr, 0, static_cast<int>(ms));
      return false;
    }
    if (::poll(&in, 1, static_cast<int>(ms)) <= 0) return false;
    char key = 0;
    return ::read(0, &key, 1) == 1 && (key == 'q' || key == 'Q');
  }

 private:
  termios saved_{};
  bool active_ = false;
};

struct Rates {
  double done = 0, enqueued = 0;
};

std::string lateness_text(int64_t oldest_ready_due_ms, int64_t now_ms) {
  if (oldest_ready_due_ms <= 0) return "-";
  const double s = static_cast<double>(std::max<int64_t>(0, now_ms - oldest_ready_due_ms)) / 1e3;
  return s < 10 ? fmt::format("{:.3f}s", s) : fmt::format("{:.0f}s", s);
}

}  // namespace

int top(Client& client, int64_t interval_ms, int frames, bool json) {
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::optional<RawKeys> keys;
  if (!json) keys.emplace();
  std::map<std::string, QueueStats> previous;
  int64_t previous_ms = 0;
  for (int frame = 0; !g_stop && (frames == 0 || frame < frames); ++frame) {
    auto stats = client.broker_stats();
    const int64_t now = wall_ms();
    if (!stats) return report(stats.error());
    std::map<std::string, Rates> rates;
    const double seconds = static_cast<double>(now - previous_ms) / 1e3;
    for (const auto& q : stats->queues)
      if (auto it = previous.find(q.queue); it != previous.end() && seconds > 0)
        rates[q.queue] = {static_cast<double>(q.done - it->second.done) / seconds,
                          static_cast<double>(q.accepted - it->second.accepted) / seconds};
    if (json) {
      nlohmann::json out{{"at_ms", now}, {"workers", stats->workers}, {"queues", nlohmann::json::array()}};
      for (const auto& q : stats->queues)
        out["queues"].push_back({{"queue", q.queue}, {"scheduled", q.scheduled}, {"ready", q.waiting},
                                 {"in_flight", q.in_flight}, {"done", q.done}, {"dead", q.dead}, {"retried", q.retried},
                                 {"done_per_s", rates[q.queue].done}, {"enqueued_per_s", rates[q.queue].enqueued},
                                 {"oldest_ready_due_ms", q.oldest_ready_due_ms}});
      fmt::print("{}\n", dump_json(out));
    } else {
      std::string screen = "\x1b[H\x1b[2J";
      screen += fmt::format("dueq top   {}   workers {}   every {} ms   q quits\n\n", format_time(now), stats->workers,
                            interval_ms);
      screen += fmt::format("{:<20} {:>10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>11} {:>8} {:>8}\n", "QUEUE", "SCHEDULED",
                            "READY", "IN_FLIGHT", "DONE/s", "ENQ/s", "LATE", "DONE", "DEAD", "RETRIED");
      for (const auto& q : stats->queues)
        screen += fmt::format("{:<20} {:>10} {:>8} {:>9} {:>9.1f} {:>9.1f} {:>9} {:>11} {:>8} {:>8}\n", q.queue,
                              q.scheduled, q.waiting, q.in_flight, rates[q.queue].done, rates[q.queue].enqueued,
                              lateness_text(q.oldest_ready_due_ms, now), q.done, q.dead, q.retried);
      if (stats->queues.empty()) screen += "(no queues yet)\n";
      fmt::print("{}", screen);
      std::fflush(stdout);
    }
    previous.clear();
    for (const auto& q : stats->queues) previous[q.queue] = q;
    previous_ms = now;
    if (frames != 0 && frame + 1 == frames) break;
    if (keys ? keys->quit_within(interval_ms) : (::poll(nullptr, 0, static_cast<int>(interval_ms)), false)) break;
  }
  return 0;
}

}  // namespace dueq::cli
