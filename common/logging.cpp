#include "common/logging.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace dueq {

Result<void> setup_logging(const std::string& process, const std::string& level) {
  const auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off")
    return fail(Errc::bad_argument, "unknown log level '" + level + "': use trace, debug, info, warn, error or off");
  auto logger = spdlog::stderr_color_mt(process);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %n[%P] %^%l%$ %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return {};
}

std::string loggable(std::string_view peer_text, size_t cap) {
  std::string out;
  const size_t shown = std::min(peer_text.size(), cap);
  for (size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(peer_text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') out += static_cast<char>(c);
    else out += fmt::format("\\x{:02x}", c);
  }
  if (peer_text.size() > cap) out += fmt::format("... ({} bytes)", peer_text.size());
  return out;
}

std::optional<uint64_t> LogLimiter::admit(const std::string& key, int64_t now_ms) {
  if (keys_.size() >= max_keys_ && !keys_.contains(key)) keys_.clear();
  auto [it, first] = keys_.try_emplace(key);
  Entry& entry = it->second;
  if (now_ms - second_start_ms_ >= 1000) {
    second_start_ms_ = now_ms;
    written_this_second_ = 0;
  }
  if ((!first && now_ms - entry.written_ms < interval_ms_) || written_this_second_ >= per_second_) {
    ++entry.held_back;
    return std::nullopt;
  }
  ++written_this_second_;
  entry.written_ms = now_ms;
  return std::exchange(entry.held_back, 0);
}

}  // namespace dueq

