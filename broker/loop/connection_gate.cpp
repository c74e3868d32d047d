#include "broker/loop/connection_gate.hpp"

#include "broker/loop/connection_monitor.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace dueq::broker {

ConnectionGate::ConnectionGate(const Clock& clock) : clock_(clock) { refill(); }

uint64_t ConnectionGate::raise_open_files_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    const rlim_t soft = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return soft;
  }
  return limit.rlim_cur;
}

void ConnectionGate::refill() {
  while (reserve_.size() < kReserveFds) {
    UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return;  // still at the limit: the next tick tries again
    reserve_.push_back(std::move(fd));
  }
}

void ConnectionGate::at_fd_limit(uint64_t failures) {
  if (failures == 0) return;
  const int64_t now = clock_.steady_ms();
  if (admitting_) {
    backoff_ms_ = now - last_limit_ms_ >= kCalmMs ? kFirstBackoffMs : std::min(backoff_ms_ * 2, kMaxBackoffMs);
    admitting_ = false;
    spdlog::warn("at the open-file limit ({}): releasing {} reserved descriptors and turning new connections away "
                 "for {} ms; connected peers are still served (raise LimitNOFILE / ulimit -n)",
                 open_files_limit(), reserve_.size(), backoff_ms_);
  }
  last_limit_ms_ = now;
  reserve_.clear();
  retry_at_ms_ = now + backoff_ms_;
}

void ConnectionGate::tick() {
  const int64_t now = clock_.steady_ms();
  if (turned_away_unlogged_ > 0 && log_.admit("", now)) {
    spdlog::warn("turned {} new connections away at the open-file limit ({} since start)", turned_away_unlogged_,
                 turned_away_);
    turned_away_unlogged_ = 0;
  }
  if (admitting_ || now < retry_at_ms_) return;
  refill();
  if (reserve_.size() < kReserveFds) {
    retry_at_ms_ = now + backoff_ms_;
    return;
  }
  admitting_ = true;
  spdlog::info("open-file reserve restored: accepting new connections again");
}

int64_t ConnectionGate::us_until_retry() const {
  if (admitting_ && turned_away_unlogged_ == 0) return -1;
  const int64_t at = admitting_ ? clock_.steady_ms() + kLogIntervalMs : retry_at_ms_;
  return std::max<int64_t>(0, (at - clock_.steady_ms()) * 1000);
}

}  // namespace dueq::broker
