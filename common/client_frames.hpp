#pragma once
// The frames between the broker and its clients (docs/protocol.md):
// ENQUEUE, STATS, JOB, ADMIN and WAIT requests and their replies.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/protocol_fields.hpp"

namespace dueq::proto {

enum class UniqueUntil : uint8_t {
  none = 0,     // not unique
  waiting = 1,  // until it is first leased (scheduled or ready)
  started = 2,  // until a worker announces its start
  done = 3,     // until it is done, dead or cancelled
  period = 4,   // for unique_for_ms after its enqueue, unless it dies or is cancelled first (a throttle)
  // While scheduled; a new job with its unique key gives it its record
  // (payload...) and due time instead, at most unique_for_ms after its first
  // enqueue (run once, after the last of a burst).
  debounce = 5,
};
}  // namespace dueq::proto
MSGPACK_ADD_ENUM(dueq::proto::UniqueUntil);
namespace dueq::proto {

struct NewJob {
  std::string queue;
  std::string id;
  std::string type;
  Bytes payload;
  int64_t due_ms = 0;          // Unix ms; 0 = now
  uint32_t max_attempts = 0;   // 0 = the queue's default
  int64_t backoff_base_ms = 0; // 0 = the queue's default
  int64_t backoff_cap_ms = 0;  // 0 = the queue's default
  // Groups the job with others for per-key ordering and limits
  // (docs/keys.md): any bytes, up to kMaxKeyBytes; "" = none, and then not
  // sent. Appended in 0.7: a producer before it sends 8 fields.
  Bytes key;
  // Unique jobs (docs/keys.md): while this job holds `unique_key`, a new job
  // of the queue with the same one is answered duplicate with this one's id.
  // Sent (after `key`, empty or not) only when unique_until is not none.
  Bytes unique_key;
  UniqueUntil unique_until = UniqueUntil::none;
  int64_t unique_for_ms = 0;  // period: how long after the enqueue the hold lasts
  // Appended in 0.8: the job must not start after this (Unix ms); past it,
  // it goes dead with the reason "expired" (docs/jobs.md). 0 = none, and
  // then not sent; sent after the three unique fields (none: "", 0, 0).
  int64_t start_by_ms = 0;
  // Appended in 0.9: a W3C trace context (docs/jobs.md, "Tracing"), kept
  // with the job and handed to its handler; "" = none, and then not sent.
  // Sent after start_by_ms (0 for none).
  std::string traceparent;
  std::string tracestate;
  static constexpr size_t kFieldsBefore07 = 8;
  template <typename Packer>
  void msgpack_pack(Packer& pk) const {
    if (!traceparent.empty() || !tracestate.empty())
      msgpack::type::make_define_array(queue, id, type, payload, due_ms, max_attempts, backoff_base_ms, backoff_cap_ms,
                                       key, unique_key, unique_until, unique_for_ms, start_by_ms, traceparent, tracestate)
          .msgpack_pack(pk);
    else if (start_by_ms > 0)
      msgpack::type::make_define_array(queue, id, type, payload, due_ms, max_attempts, backoff_base_ms, backoff_cap_ms,
                                       key, unique_key, unique_until, unique_for_ms, start_by_ms)
          .msgpack_pack(pk);
    else if (unique_until != UniqueUntil::none)
      msgpack::type::make_define_array(queue, id, type, payload, due_ms, max_attempts, backoff_base_ms, backoff_cap_ms,
                                       key, unique_key, unique_until, unique_for_ms)
          .msgpack_pack(pk);
    else if (!key.data.empty())
      msgpack::type::make_define_array(queue, id, type, payload, due_ms, max_attempts, backoff_base_ms, backoff_cap_ms, key)
          .msgpack_pack(pk);
    else
      msgpack::type::make_define_array(queue, id, type, payload, due_ms, max_attempts, backoff_base_ms, backoff_cap_ms)
          .msgpack_pack(pk);
  }
  void msgpack_unpack(const msgpack::object& o) {
    detail::require_fields(o, kFieldsBefore07);
    // The three unique fields come together or not at all.
    if (o.type == msgpack::type::ARRAY && o.via.array.size > 9 && o.via.array.size < 12) throw detail::MissingFields(o.via.array.size, 12);
    msgpack::type::make_define_array(queue, id, type, payload, due_ms, max_attempts, backoff_base_ms, backoff_cap_ms, key,
                                     unique_key, unique_until, unique_for_ms, start_by_ms, traceparent, tracestate)
        .msgpack_unpack(o);
  }
};

struct Enqueue {
  static constexpr Type kType = Type::enqueue;
  uint64_t request_id = 0;
  std::vector<NewJob> jobs;
  DUEQ_FIELDS(request_id, jobs)
};

enum class EnqueueStatus : uint8_t { accepted = 0, duplicate = 1, rejected = 2, overloaded = 3 };
}  // namespace dueq::proto
MSGPACK_ADD_ENUM(dueq::proto::EnqueueStatus);
namespace dueq::proto {

struct EnqueueOutcome {
  std::string id;
  EnqueueStatus status = EnqueueStatus::accepted;
  std::string reason;
  // duplicate by a unique key: the job that holds it (appended; sent only
  // then, so other outcomes keep their 3 fields).
  std::string existing_id;
  template <typename Packer>
  void msgpack_pack(Packer& pk) const {
    if (existing_id.empty()) msgpack::type::make_define_array(id, status, reason).msgpack_pack(pk);
    else msgpack::type::make_define_array(id, status, reason, existing_id).msgpack_pack(pk);
  }
  void msgpack_unpack(const msgpack::object& o) {
    detail::require_fields(o, 3);
    msgpack::type::make_define_array(id, status, reason, existing_id).msgpack_unpack(o);
  }
};

struct EnqueueReply {
  static constexpr Type kType = Type::enqueue_reply;
  uint64_t request_id = 0;
  std::vector<EnqueueOutcome> results;
  uint32_t retry_after_ms = 0;
  DUEQ_FIELDS(request_id, results, retry_after_ms)
};

struct StatsRequest {
  static constexpr Type kType = Type::stats_request;
  uint64_t request_id = 0;
  DUEQ_FIELDS(request_id)
};

// A key and how many jobs wait for a turn of it (docs/keys.md).
struct KeyWaiting {
  Bytes key;
  int64_t waiting = 0;
  DUEQ_FIELDS(key, waiting)
};

struct QueueStats {
  std::string queue;
  int64_t scheduled = 0;   // waiting for a future due time
  int64_t waiting = 0;     // due, not yet leased
  int64_t in_flight = 0;   // leased to a worker
  int64_t done = 0;
  int64_t dead = 0;
  int64_t accepted = 0;
  int64_t retried = 0;
  int64_t stale_acks = 0;
  int64_t next_due_ms = 0; // 0 = nothing scheduled
  int64_t cancelled = 0;
  int64_t purged = 0;
  // Appended in 0.2; a reply from an older broker lacks them (read as 0).
  int64_t died = 0;                 // jobs that went to the dead-letter set, ever
  int64_t unconfirmed = 0;          // of `retried`, deliveries that went back unstarted (no attempt used)
  int64_t replayed = 0;             // dead letters replayed
  int64_t stale_extends = 0;        // lease renewals of deliveries no longer current
  int64_t oldest_ready_due_ms = 0;  // due time of the longest-waiting ready job; 0 = none waits
  // Appended in 0.3 (absent from older brokers' replies: read as 0).
  int64_t paused_since_ms = 0;      // when `dueq pause` paused it; 0 = it runs
  double rate_limit = 0;            // jobs started per second at most; 0 = none
  int64_t rate_burst = 0;           // with a rate limit: jobs started at once after a quiet spell
  int64_t concurrency_limit = 0;    // jobs leased at once across all workers at most; 0 = none
  // Appended in 0.6 (absent from older brokers' replies: read as 0).
  int64_t history_kept = 0;         // finished jobs whose document is kept (history_retention)
  int64_t history_trimmed = 0;      // kept documents trimmed by age or count, ever
  // Appended in 0.7 (docs/keys.md).
  int64_t keys_running = 0;         // keys holding a turn
  int64_t waiting_for_key = 0;      // of `waiting`, jobs parked until their key has a turn
  std::vector<KeyWaiting> top_keys; // the (at most 10) keys with the most jobs waiting for a turn, most first
  // Appended in 0.8 (docs/jobs.md).
  int64_t snoozed = 0;              // snoozes its handlers asked for, ever
  int64_t expired = 0;              // of `died`, jobs that went dead unstarted past their start-by deadline, ever
  static constexpr size_t kFieldsBefore02 = 12;
  DUEQ_FIELDS_SINCE(kFieldsBefore02, queue, scheduled, waiting, in_flight, done, dead, accepted, retried, stale_acks,
                    next_due_ms, cancelled, purged, died, unconfirmed, replayed, stale_extends, oldest_ready_due_ms,
                    paused_since_ms, rate_limit, rate_burst, concurrency_limit, history_kept, history_trimmed,
                    keys_running, waiting_for_key, top_keys, snoozed, expired)
};

struct StatsReply {
  static constexpr Type kType = Type::stats_reply;
  uint64_t request_id = 0;
  std::vector<QueueStats> queues;
  uint32_t workers = 0;
  DUEQ_FIELDS(request_id, queues, workers)
};

struct JobRequest {
  static constexpr Type kType = Type::job_request;
  uint64_t request_id = 0;
  std::string id;
  std::string queue;  // empty: search every known queue
  DUEQ_FIELDS(request_id, id, queue)
};

struct JobReply {
  static constexpr Type kType = Type::job_reply;
  uint64_t request_id = 0;
  bool found = false;
  std::map<std::string, std::string> fields;
  DUEQ_FIELDS(request_id, found, fields)
};

// Operator commands: cancel, dead_list, replay, purge, audit (docs/protocol.md).
struct AdminRequest {
  static constexpr Type kType = Type::admin_request;
  uint64_t request_id = 0;
  std::string op;
  std::string queue;              // "" = every queue (where the op allows)
  std::vector<std::string> ids;
  int64_t older_than_ms = 0;      // purge: dead before now - older_than_ms
  uint32_t limit = 0;
  // Appended in 0.3 (absent from older clients' requests): named arguments
  // of cron_add and cron_remove.
  std::map<std::string, std::string> args;
  static constexpr size_t kFieldsBefore03 = 6;
  DUEQ_FIELDS_SINCE(kFieldsBefore03, request_id, op, queue, ids, older_than_ms, limit, args)
};

struct AdminReply {
  static constexpr Type kType = Type::admin_reply;
  uint64_t request_id = 0;
  std::vector<std::map<std::string, std::string>> rows;
  std::string summary;
  // Appended in 0.4: where a paged listing (dead_list) goes on, passed back
  // as the request's args["after"]; "" when it is complete.
  std::string next;
  static constexpr size_t kFieldsBefore04 = 3;
  DUEQ_FIELDS_SINCE(kFieldsBefore04, request_id, rows, summary, next)
};


// Waiting for a job's end (docs/protocol.md, WAIT): answered when it is
// done, dead or cancelled, or with state "pending" after timeout_ms.
struct WaitRequest {
  static constexpr Type kType = Type::wait;
  static constexpr int64_t kMaxTimeoutMs = 60'000;
  uint64_t request_id = 0;
  std::string queue;
  std::string id;
  int64_t timeout_ms = 0;  // 0..kMaxTimeoutMs; 0: answers at once what Redis holds
  DUEQ_FIELDS(request_id, queue, id, timeout_ms)
};

// Flows and batches (docs/flows.md): GROUP_ENQUEUE stores a tree of jobs
// (each parent waits for its children), jobs joining a batch, or both, all
// or nothing.
enum class ChildFailure : uint8_t {
  none = 0,         // a root: it has no parent
  fail_parent = 1,  // dead or cancelled: its parent goes dead with its reason
  ignore = 2,       // its parent runs as if it were done
  proceed = 3,      // its parent runs, and sees it failed among its children
};
enum class GroupRole : uint8_t {
  job = 0,          // a job of the flow; a root joins the batch, if any
  on_success = 1,   // the batch's success callback: runs when every member is done
  on_complete = 2,  // the batch's complete callback: runs when every member settled
};
enum class BatchAction : uint8_t { none = 0, open = 1, add = 2 };
}  // namespace dueq::proto
MSGPACK_ADD_ENUM(dueq::proto::ChildFailure);
MSGPACK_ADD_ENUM(dueq::proto::GroupRole);
MSGPACK_ADD_ENUM(dueq::proto::BatchAction);
namespace dueq::proto {

struct GroupJob {
  NewJob job;          // its queue is the request's (or "")
  uint32_t parent = 0; // 1-based number of its parent in the request (a job before it); 0: a root
  ChildFailure on_failure = ChildFailure::none;
  GroupRole role = GroupRole::job;
  DUEQ_FIELDS(job, parent, on_failure, role)
};

struct GroupEnqueue {
  static constexpr Type kType = Type::group_enqueue;
  static constexpr size_t kMaxJobs = 1'000;   // jobs per request (a flow is one request)
  static constexpr size_t kMaxDepth = 4;      // levels of a flow, its root included
  static constexpr size_t kMaxBatchIdBytes = 128;
  static constexpr int64_t kMaxBatchMembers = 1'000'000;  // members of one batch, over all its requests
  uint64_t request_id = 0;
  std::string queue;
  std::string batch_id;  // "" with BatchAction::none
  BatchAction batch = BatchAction::none;
  bool close = false;    // the batch takes no more members after these
  std::vector<GroupJob> jobs;
  DUEQ_FIELDS(request_id, queue, batch_id, batch, close, jobs)
};

enum class GroupStatus : uint8_t {
  accepted = 0,
  duplicate = 1,     // job_index's id is known to the queue: nothing was stored
  rejected = 2,      // bad request (reason; job_index when one job is at fault)
  overloaded = 3,    // the queue's max_backlog has no room for every job
  no_batch = 4,      // add: no such batch
  batch_closed = 5,  // add: the batch is closed
  batch_exists = 6,  // open: a batch of that id exists
  batch_full = 7,    // the batch would have more than kMaxBatchMembers members
};
}  // namespace dueq::proto
MSGPACK_ADD_ENUM(dueq::proto::GroupStatus);
namespace dueq::proto {

struct GroupEnqueueReply {
  static constexpr Type kType = Type::group_enqueue_reply;
  uint64_t request_id = 0;
  GroupStatus status = GroupStatus::accepted;
  std::string reason;
  int64_t job_index = -1;  // 0-based: the job at fault (duplicate, rejected), else -1
  uint32_t retry_after_ms = 0;
  DUEQ_FIELDS(request_id, status, reason, job_index, retry_after_ms)
};

struct WaitReply {
  static constexpr Type kType = Type::wait_reply;
  uint64_t request_id = 0;
  std::string state;        // done, dead, cancelled; pending (not ended by the timeout); unknown (no such job)
  int64_t finished_ms = 0;  // when it ended (Unix ms); 0 unless it ended
  Bytes result;             // done: what its handler returned (may be empty)
  std::string error;        // dead: why (its last error)
  DUEQ_FIELDS(request_id, state, finished_ms, result, error)
};

}  // namespace dueq::proto
