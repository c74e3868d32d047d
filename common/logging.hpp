#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <memory>

#include <spdlog/sinks/sink.h>

#include "common/error.hpp"

namespace dueq {

// Sets up the default spdlog logger for a process ("broker", "worker", ...)
// at the given level name (trace, debug, info, warn, error): to stderr, each
// line whole, its level coloured only when stderr is a terminal.
Result<void> setup_logging(const std::string& process, const std::string& level);

// A sink that writes each formatted line to `fd` with one write(2), so that
// the lines of processes sharing a terminal or a pipe (a broker and a worker
// started from one shell) never interleave mid-line; with `color`, the
// level is wrapped in ANSI colour codes inside that one write.
std::shared_ptr<spdlog::sinks::sink> whole_line_sink(int fd, bool color);

// A string a peer sent, made safe for one log line: printable ASCII is kept,
// every other byte is written as \xNN (no forged line breaks or terminal
// escapes), and at most `cap` bytes of it are shown.
std::string loggable(std::string_view peer_text, size_t cap = 64);

// Decides which log lines about peers are written: at most one per key (a
// peer identity) per interval and at most `per_second` in all, so a flood of
// frames or of peers costs a bounded number of lines. Lines held back are
// counted and reported with the key's next line.
class LogLimiter {
 public:
  LogLimiter(int64_t interval_ms, int per_second, size_t max_keys)
      : interval_ms_(interval_ms), per_second_(per_second), max_keys_(max_keys) {}
  // Lines held back for `key` since its last written one, or nullopt when
  // this line is to be held back too. `now_ms` is a steady time.
  std::optional<uint64_t> admit(const std::string& key, int64_t now_ms);

 private:
  struct Entry {
    int64_t written_ms = 0;
    uint64_t held_back = 0;
  };
  int64_t interval_ms_;
  int per_second_;
  size_t max_keys_;
  std::unordered_map<std::string, Entry> keys_;
  int64_t second_start_ms_ = 0;
  int written_this_second_ = 0;
};

}  // namespace dueq
