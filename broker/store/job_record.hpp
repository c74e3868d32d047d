#pragma once
// The stored form of a job's immutable part: one msgpack array per job in
// the queue's `jobs` hash. The broker writes it at enqueue and reads it back
// at lease; Lua only unpacks it on the failure paths (nack, reclaim) to read
// max attempts and backoff. The payload is packed as a msgpack str because
// Redis's cmsgpack cannot decode bin.
//
//   [version=2, type, payload, due_ms, max_attempts, created_ms,
//    backoff_base_ms (0 = queue's), backoff_cap_ms (0 = queue's),
//    payload_checksum (proto::payload_checksum of the payload at enqueue)]
//
// A job with a key (NewJob::key) is written as version 3, with the key
// right after the type, where Lua reads it without unpacking the payload
// (lua/lib/record.lua):
//
//   [version=3, type, key, payload, due_ms, ... as version 2]
//
// A job without one stays version 2, byte for byte as before keys.
// A job with a start-by deadline (NewJob::start_by_ms) is written as
// version 4, with its key (empty when it has none) and the deadline last:
//
//   [version=4, type, key, payload, due_ms, ... as version 2, start_by_ms]
//
// A job with a trace context (NewJob::traceparent) is written as version 5:
// version 4's fields (its key and deadline empty or 0 when it has none),
// then the traceparent and the tracestate:
//
//   [version=5, type, key, payload, ... as version 4, traceparent, tracestate]
//
// Version 1 records (written before the checksum) have the first 8 fields;
// they are read with the checksum of the payload as read.
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace dueq::broker {

inline constexpr int kJobRecordVersion = 2;
inline constexpr int kKeyedJobRecordVersion = 3;
inline constexpr int kStartByJobRecordVersion = 4;
inline constexpr int kTracedJobRecordVersion = 5;

struct JobRecord {
  std::string type;
  std::string payload;
  int64_t due_ms = 0;
  uint32_t max_attempts = 0;
  int64_t created_ms = 0;
  int64_t backoff_base_ms = 0;
  int64_t backoff_cap_ms = 0;
  uint64_t payload_checksum = 0;
  std::string key;  // "" = none
  int64_t start_by_ms = 0;  // 0 = none: never started after this (Unix ms)
  std::string traceparent;  // "" = none (W3C trace context: docs/jobs.md, "Tracing")
  std::string tracestate;
  bool operator==(const JobRecord&) const = default;
};

std::string encode_job_record(const JobRecord& record);

// A stored record's version, as the job document shows it (`v`): the
// XXH3-64 of its bytes in 16 lower-case hex digits. It changes whenever the
// record does (an edit, a debounce), so an edit that names it is refused
// once another change came between (lua/edit.lua compares the bytes).
std::string record_version(std::string_view bytes);
Result<JobRecord> decode_job_record(std::string_view bytes);

}  // namespace dueq::broker
