#include "broker/refusal_backoff.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace dueq::broker {

int64_t RefusalBackoff::us_until_retry() const {
  if (backoff_ms_ == 0) return -1;
  return std::max<int64_t>(0, (retry_at_ms_ - clock_.steady_ms()) * 1000);
}

void RefusalBackoff::refused(std::string_view what, std::string_view error) {
  const int64_t now = clock_.steady_ms();
  // Replies of calls sent before the first refusal came back do not push the
  // retry further out.
  if (now >= retry_at_ms_) {
    backoff_ms_ = std::clamp<int64_t>(backoff_ms_ * 2, kFirstMs, kMaxMs);
    retry_at_ms_ = now + backoff_ms_;
  }
  if (auto held_back = log_.admit("", now))
    spdlog::error("Redis refused {}: {}; the broker's writes wait {} ms ({} more refusals not logged)", what, error,
                  backoff_ms_, *held_back);
}

}  // namespace dueq::broker
