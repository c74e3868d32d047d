#include "common/logging.hpp"

#include <algorithm>
#include <utility>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

namespace dueq {

namespace {

class WholeLineSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  WholeLineSink(int fd, bool color) : fd_(fd), color_(color) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::string line;
    const std::string_view text(formatted.data(), formatted.size());
    if (color_ && msg.color_range_end > msg.color_range_start) {
      line.reserve(text.size() + 16);
      line.append(text.substr(0, msg.color_range_start));
      line.append(color_of(msg.level));
      line.append(text.substr(msg.color_range_start, msg.color_range_end - msg.color_range_start));
      line.append("\033[m");
      line.append(text.substr(msg.color_range_end));
    } else {
      line.assign(text);
    }
    for (size_t at = 0; at < line.size();) {
      const ssize_t n = ::write(fd_, line.data() + at, line.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // nowhere to log to: the line is dropped, never thrown
      at += static_cast<size_t>(n);
    }
  }
  void flush_() override {}

 private:
  static const char* color_of(spdlog::level::level_enum level) {
    switch (level) {
      case spdlog::level::trace: return "\033[37m";
      case spdlog::level::debug: return "\033[36m";
      case spdlog::level::info: return "\033[32m";
      case spdlog::level::warn: return "\033[33m\033[1m";
      case spdlog::level::err: return "\033[31m\033[1m";
      case spdlog::level::critical: return "\033[1m\033[41m";
      default: return "";
    }
  }

  int fd_;
  bool color_;
};

// Colour on a terminal that can show it, never into a file or a pipe.
// Read once, from setup_logging at a program's start, before its threads:
// nothing sets the environment then.
bool stderr_wants_color() {
  const char* term = std::getenv("TERM");  // NOLINT(concurrency-mt-unsafe): at start, before any thread
  const bool no_color = std::getenv("NO_COLOR") != nullptr;  // NOLINT(concurrency-mt-unsafe): likewise
  return ::isatty(STDERR_FILENO) == 1 && !no_color && term != nullptr && std::string_view(term) != "dumb";
}

}  // namespace

std::shared_ptr<spdlog::sinks::sink> whole_line_sink(int fd, bool color) { return std::make_shared<WholeLineSink>(fd, color); }

Result<void> setup_logging(const std::string& process, const std::string& level) {
  const auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off")
    return fail(Errc::bad_argument, "unknown log level '" + level + "': use trace, debug, info, warn, error or off");
  spdlog::drop(process);
  auto logger = std::make_shared<spdlog::logger>(process, whole_line_sink(STDERR_FILENO, stderr_wants_color()));
  spdlog::register_logger(logger);
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

