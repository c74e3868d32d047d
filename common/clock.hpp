#pragma once
// Two clocks. Due times are wall-clock milliseconds: they are what producers
// ask for and what Redis stores. Liveness, lease deadlines and timeouts are
// measured on the steady clock, which no clock step (NTP, an operator, a VM
// resumed) moves, so a step never declares a healthy worker dead. Components
// take a Clock& so tests can step the wall clock.
#include <chrono>
#include <cstdint>
#include <ctime>

namespace dueq {

inline int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

inline int64_t wall_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

inline int64_t steady_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

inline int64_t steady_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t wall_us() const = 0;
  virtual int64_t steady_ms() const = 0;
  // Finer, for measurements (a clock that steps in ms need not override it).
  virtual int64_t steady_us() const { return steady_ms() * 1000; }
  int64_t wall_ms() const { return wall_us() / 1000; }
  // CPU time of the calling thread: beside the steady clock it tells a
  // thread that worked from one that was stopped or starved (a clock that
  // cannot tell says it always ran).
  virtual int64_t thread_cpu_ms() const { return steady_ms(); }
};

class SystemClock final : public Clock {
 public:
  int64_t wall_us() const override { return dueq::wall_us(); }
  int64_t steady_ms() const override { return dueq::steady_ms(); }
  int64_t steady_us() const override { return dueq::steady_us(); }
  int64_t thread_cpu_ms() const override {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
  }
};

inline const Clock& system_clock() {
  static const SystemClock clock;
  return clock;
}

// Lease deadlines are stored in Redis, where a broker started later must read
// them, so they are written in milliseconds since the epoch; but they advance
// with the steady clock from the moment this broker set the clock. A wall
// clock step after that moves no lease (a step backwards would otherwise
// stretch every lease, one forwards would expire them all and re-deliver
// running jobs). Every broker that leads a store sets it from that store's
// clock (Redis TIME) when it takes over, so a successor whose host clock is
// off by minutes reads its predecessor's deadlines as they were meant; until
// then it runs from this host's wall clock.
class LeaseClock {
 public:
  explicit LeaseClock(const Clock& clock) : clock_(clock), offset_ms_(clock.wall_ms() - clock.steady_ms()) {}
  int64_t now_ms() const { return offset_ms_ + clock_.steady_ms(); }
  // From now on: `server_ms` was the time at the steady instant `at_steady_ms`.
  void set(int64_t server_ms, int64_t at_steady_ms) { offset_ms_ = server_ms - at_steady_ms; }

 private:
  const Clock& clock_;
  int64_t offset_ms_;
};

}  // namespace dueq
