#pragma once
// dueq enqueue: one job from flags, or JSON lines from a file.
#include <cstdint>
#include <expected>
#include <string>

#include "dueq/client.hpp"

namespace dueq::cli {

struct EnqueueArgs {
  std::string queue, type, payload, payload_file, delay, at, id, from, backoff_base, backoff_cap, key;
  std::string unique_key, unique_until, unique_for;  // docs/keys.md, "Unique jobs"
  std::string start_by, start_within;  // a start-by deadline: a time, or a duration from now (docs/jobs.md)
  std::string traceparent, tracestate;  // W3C trace context (docs/jobs.md, "Tracing"); default $TRACEPARENT, $TRACESTATE
  int64_t at_ms = -1;
  uint32_t max_attempts = 0;
};

// The job the flags describe, checked as the broker would check it (before
// any network call); the error says which flag is wrong.
std::expected<JobSpec, std::string> job_from_args(const EnqueueArgs& args);

// Prints the job's id (`json`: {"id", "status"}); returns the exit code.
// `generated`: the id was made here, and is shown when the outcome is unknown.
int enqueue_one(Client& client, JobSpec job, bool generated, bool json);

// JSON lines: {"queue","type","payload","delay_ms"|"at_ms","id","max_attempts",
// "backoff_base_ms","backoff_cap_ms","key","unique_key","unique_until",
// "unique_for_ms","start_by_ms","traceparent","tracestate"} (key and unique_key: a string, or bytes as
// {"encoding": "base64", "data": ...}), sent in batches of 1,000 with up to
// four outstanding; prints the counts of each outcome.
int enqueue_from(Client& client, const std::string& path, bool json);

}  // namespace dueq::cli
