#pragma once
// dueq enqueue: one job from flags, or JSON lines from a file.
#include <cstdint>
#include <string>

#include "dueq/client.hpp"

namespace dueq::cli {

struct EnqueueArgs {
  std::string queue, type, payload, payload_file, delay, at, id, from, backoff_base, backoff_cap;
  int64_t at_ms = -1;
  uint32_t max_attempts = 0;
};

// Prints the job's id; returns the exit code.
int enqueue_one(Client& client, const EnqueueArgs& args);

// JSON lines: {"queue","type","payload","delay_ms"|"at_ms","id","max_attempts",
// "backoff_base_ms","backoff_cap_ms"}, sent in batches of 1,000 with up to
// four outstanding; prints the counts of each outcome.
int enqueue_from(Client& client, const std::string& path);

}  // namespace dueq::cli
