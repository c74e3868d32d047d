#pragma once
// The public job document: one job as every view shows it (`dueq job
// --json`, `dueq dead list --json`, `dueq list --json`, the dashboard's
// /api/job, the C++ Client and the Python Producer), described field by
// field in docs/jobs.md. It is built from the fields a JOB or ADMIN reply
// carries (short names on the wire, docs/protocol.md) by job_document().
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dueq {

// One failed delivery, from the job's error log.
struct JobError {
  // The attempt it used (1, 2, ...), or for a delivery that never started
  // (not an attempt) the count of such deliveries; nullopt for a line an
  // older broker wrote that names neither.
  std::optional<int64_t> number;
  bool counted = true;            // false: a delivery that ended before a handler started it
  std::optional<int64_t> at_ms;   // when the broker recorded it (nullopt in an older broker's line)
  std::string worker;             // the worker that held it ("" when none is known: a lease that ran out)
  std::string reason;
};

// How far a running job got, as its handler last reported it.
struct JobProgress {
  int64_t percent = 0;            // 0..100
  std::string text;               // any bytes, at most 256
  std::optional<int64_t> at_ms;   // when the broker heard it
};

struct JobDocument {
  std::string id;
  std::string queue;
  // scheduled, ready, running, done, dead or cancelled.
  std::string state;
  // What the stored record holds. A done or cancelled job keeps it while
  // its queue's history does (history_retention, history_max); after that
  // only its id is kept, for done_retention, and these are empty.
  bool record_kept = false;
  std::string type;
  std::string key;                          // the job's key ("" = none: docs/keys.md)
  std::optional<std::string> payload;       // absent in list rows (payload_bytes says its size)
  std::optional<uint64_t> payload_bytes;
  std::optional<int64_t> due_ms;            // when it was first due
  std::optional<int64_t> run_at_ms;         // scheduled or ready: when it is due now (a retry's backoff included)
  std::optional<int64_t> start_by_ms;       // its start-by deadline: never started after it (docs/jobs.md)
  std::string traceparent;                  // its W3C trace context ("" = none: docs/jobs.md, "Tracing")
  std::string tracestate;
  std::optional<int64_t> created_ms;
  std::optional<int64_t> lease_deadline_ms; // running: when its lease runs out unless extended
  std::optional<int64_t> started_ms;        // kept done or cancelled: when its last delivery started (broker clock)
  std::string worker;                       // kept done or cancelled: the worker that ran it ("" when none did or it is not known)
  std::optional<int64_t> finished_ms;       // done, dead, cancelled
  std::optional<int64_t> attempt;           // attempts used, a running one included
  std::optional<int64_t> max_attempts;
  std::optional<int64_t> backoff_base_ms;   // its own backoff (the queue's when absent)
  std::optional<int64_t> backoff_cap_ms;
  std::string last_error;
  std::vector<JobError> errors;             // oldest first (the last 8 KiB of them)
  bool cancel_requested = false;            // running, and a user asked to cancel it
  bool waiting_for_key = false;             // ready, and parked until its key has a turn free (docs/keys.md)
  std::string unique_key;                   // the unique key it holds now ("" when none; docs/keys.md)
  std::string unique_until;                 // how long it holds it: waiting, started, done, period or debounce
  std::vector<std::string> also_in;         // other queues holding a job with this id
  // Flows and batches (docs/flows.md), while it waits in one:
  std::string parent;                       // the flow parent waiting for it ("" = none)
  std::string batch;                        // the batch it is a member of ("" = none)
  bool has_children = false;                // a flow parent: its children are listed by `dueq flow children`
  // The stored record's version (16 hex digits; "" when the record is not
  // kept): `dueq job edit` and Client::edit_payload name it, and are
  // refused once the job changed since (docs/jobs.md).
  std::string version;
  // Done: what its handler returned, while its done entry is kept (absent:
  // none, or not done).
  std::optional<std::string> result;
  // Running: its handler's last progress report (absent: none yet).
  std::optional<JobProgress> progress;
};

// The document of a JOB reply's or a job row's fields (an empty type when
// the fields do not name a job).
JobDocument job_document(const std::map<std::string, std::string>& fields);

// A job's error log (one entry per line, lua/lib/lost_delivery.lua), also
// the lines older brokers wrote ("attempt N: reason").
std::vector<JobError> parse_error_log(std::string_view log);

// The document as JSON (docs/jobs.md): bytes that are not UTF-8 as
// {"encoding": "base64", "data": ...}; times as ISO 8601 UTC and ms.
std::string job_json(const JobDocument& job, int indent = -1);

}  // namespace dueq
