#include "broker/store/refusal_backoff.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace dueq::broker {

int64_t RefusalBackoff::us_until_retry() const {
  const int64_t now = clock_.steady_ms();
  int64_t at = backoff_ms_ > 0 ? retry_at_ms_ : -1;
  for (const auto& [queue, until] : moving_until_ms_)
    if (until > now && (at < 0 || until < at)) at = until;
  if (at < 0) return -1;
  return std::max<int64_t>(0, (at - now) * 1000);
}

bool RefusalBackoff::holding(const std::string& queue) const {
  if (holding()) return true;
  auto it = moving_until_ms_.find(queue);
  return it != moving_until_ms_.end() && clock_.steady_ms() < it->second;
}

void RefusalBackoff::refused(const std::string& queue, std::string_view what, std::string_view error) {
  const int64_t now = clock_.steady_ms();
  // As Redis says it, or inside a reply reader's message ("lease: Redis said: TRYAGAIN ...").
  const bool slot_moving = error.find("TRYAGAIN") != std::string_view::npos || error.starts_with("ASK ") ||
                           error.find(": ASK ") != std::string_view::npos;
  if (slot_moving) {
    std::erase_if(moving_until_ms_, [now](const auto& entry) { return entry.second <= now; });
    moving_until_ms_[queue] = now + kSlotMovingMs;
    if (auto held_back = moving_log_.admit(queue, now))
      spdlog::warn("queue '{}': its Redis Cluster slot is moving to another master; its calls wait until it has "
                   "({}: {}; {} more not logged)",
                   queue, what, error, *held_back);
    return;
  }
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
