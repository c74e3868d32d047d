#pragma once
// ConnectionGate: what the broker does at its open-file limit. There libzmq
// fails accept() and, the listening socket staying readable, tries again at
// once: a busy loop in its I/O thread (and a flood of monitor events in the
// broker's) for as long as a peer waits to connect. Unbinding would stop it
// but would also drop every connected worker, so the broker keeps a reserve
// of descriptors instead. At the first failed accept it releases the
// reserve, so the waiting peers are accepted, and its ZAP handler turns every
// new session away (libzmq then closes it) until the reserve is back: the
// loop ends, connected peers keep being served, and new ones get a clear
// "try again" at the cost of one handshake each. The reserve is reopened
// after a back-off that doubles (100 ms to 10 s) while the limit keeps being
// hit; one log line per 10 s says how many were turned away.
#include <cstdint>
#include <vector>

#include "common/clock.hpp"
#include "common/logging.hpp"
#include "common/unique_fd.hpp"

namespace dueq::broker {

class ConnectionGate {
 public:
  static constexpr size_t kReserveFds = 32;
  static constexpr int64_t kFirstBackoffMs = 100;
  static constexpr int64_t kMaxBackoffMs = 10'000;
  // A limit hit this long after the last one starts from the first back-off.
  static constexpr int64_t kCalmMs = 60'000;
  static constexpr int64_t kLogIntervalMs = 10'000;

  explicit ConnectionGate(const Clock& clock);

  // Each connection holds a descriptor: raises the soft open-file limit
  // (often 1,024) to the hard one. Returns the limit now in force.
  static uint64_t raise_open_files_limit();

  // New sessions are admitted (the reserve is held).
  bool admitting() const { return admitting_; }
  // `failures` accepts failed at the open-file limit (from the socket monitor).
  void at_fd_limit(uint64_t failures);
  // The ZAP handler turned a new session away.
  void turned_away() { ++turned_away_; ++turned_away_unlogged_; }
  // Reopens the reserve once the back-off has passed; admits again when it
  // is whole.
  void tick();
  // Microseconds until tick() has work; -1 when admitting.
  int64_t us_until_retry() const;

  uint64_t turned_away_total() const { return turned_away_; }
  size_t reserve_held() const { return reserve_.size(); }

 private:
  void refill();

  const Clock& clock_;
  std::vector<UniqueFd> reserve_;
  bool admitting_ = true;
  int64_t backoff_ms_ = kFirstBackoffMs;
  int64_t retry_at_ms_ = 0;
  int64_t last_limit_ms_ = -kCalmMs;
  uint64_t turned_away_ = 0;
  uint64_t turned_away_unlogged_ = 0;
  LogLimiter log_{kLogIntervalMs, 1, 1};
};

}  // namespace dueq::broker
