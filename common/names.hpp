#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace dueq {

// Queue names become part of Redis keys and of the {queue} hash tag, so they
// are restricted to [A-Za-z0-9_.-], 1..64 characters.
Result<void> validate_queue_name(std::string_view name);
// "NAME" or "NAME:WEIGHT" (weight 1..1000; 1 when left out), as a worker's
// --queue gives it.
struct QueueWeight {
  std::string name;
  uint32_t weight = 1;
};
Result<QueueWeight> parse_queue_weight(std::string_view text);
// Job ids: 1..128 printable ASCII characters, no spaces.
Result<void> validate_job_id(std::string_view id);
// Job types: 1..128 printable ASCII characters, no spaces.
Result<void> validate_job_type(std::string_view type);

// A job's W3C trace context (docs/jobs.md, "Tracing"): `traceparent` is
// empty or "VV-TRACEID-PARENTID-FF" in lower-case hex (55 characters;
// version not ff, ids not all zero); `tracestate` is empty or at most 512
// printable ASCII characters, and only with a traceparent.
inline constexpr size_t kTraceparentChars = 55;
inline constexpr size_t kMaxTracestateBytes = 512;
Result<void> validate_trace_context(std::string_view traceparent, std::string_view tracestate);

}  // namespace dueq
