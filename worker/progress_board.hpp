#pragma once
// ProgressBoard: the latest progress report of each running delivery,
// written by handler threads (Job::progress) and read by the worker's main
// thread, which sends what changed in one PROGRESS frame with each
// heartbeat. A handler reporting in a tight loop costs a lock and a copy
// per report and one item per heartbeat, whatever its rate.
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/protocol.hpp"

namespace dueq::worker {

class ProgressBoard {
 public:
  // A delivery starts: its reports are kept from now on.
  void open(const proto::JobRef& ref);
  // It ended: forgotten, and reports it makes later are dropped (its
  // result says the rest).
  void close(uint64_t token);
  // The handler of `token` got this far: `percent` clamped to 0..100,
  // `text` cut to 256 bytes (at a UTF-8 character's start). False when the
  // delivery is not open.
  bool report(uint64_t token, int64_t percent, std::string_view text);
  // The latest report of each delivery that reported since the last take,
  // at most `max` (the rest at the next take).
  std::vector<proto::ProgressItem> take_changed(size_t max = proto::kMaxBatch);
  // A new broker session: each delivery's latest report goes again.
  void mark_all_changed();
  size_t open_count() const;

 private:
  struct Entry {
    proto::JobRef ref;
    uint32_t percent = 0;
    std::string text;
    bool reported = false;
    bool changed = false;
  };
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, Entry> entries_;  // by token
  std::vector<uint64_t> changed_;                // tokens, each once
};

// `text` cut to at most `max` bytes without splitting a UTF-8 character.
std::string_view cut_utf8(std::string_view text, size_t max);

}  // namespace dueq::worker
