#pragma once
// The dueq wire protocol: msgpack frames [version, type, body] where body is a
// msgpack array of the frame's fields in declaration order. docs/protocol.md
// is the normative description; this header is its implementation.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <msgpack.hpp>
#include <xxhash.h>

#include "common/error.hpp"

namespace dueq::proto {

inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kMaxFrameBytes = 16u << 20;
inline constexpr size_t kMaxBatch = 10'000;
inline constexpr size_t kMaxPayloadBytes = 1u << 20;
inline constexpr size_t kMaxErrorText = 4096;
// A job's key (NewJob::key): any bytes, at most this many.
inline constexpr size_t kMaxKeyBytes = 128;
// A worker lists every job it holds in each heartbeat, so what it may hold is
// bounded by the batch limit.
inline constexpr uint32_t kMaxWorkerCapacity = kMaxBatch;

enum class Type : uint8_t {
  hello = 1,
  welcome = 2,
  // 3 was a single-task frame in pre-release drafts; it is not reused.
  heartbeat = 4,
  pong = 5,
  results = 6,
  confirm = 7,
  bye = 8,
  cancel = 9,
  enqueue = 10,
  enqueue_reply = 11,
  stats_request = 12,
  stats_reply = 13,
  job_request = 14,
  job_reply = 15,
  admin_request = 16,
  admin_reply = 17,
  tasks = 18,
  received = 19,
  error = 20,
  starting = 21,
  start_reply = 22,
  hand_back = 23,
  wait = 24,
  wait_reply = 25,
  progress = 26,
};

namespace detail {
// A body or nested item with fewer fields than its struct: msgpack-cxx would
// leave the missing ones at their defaults (a RESULTS item without its outcome
// read as "done"); the protocol says such a frame MUST be rejected.
struct MissingFields : std::runtime_error {
  MissingFields(size_t have, size_t need)
      : std::runtime_error("an array of " + std::to_string(have) + " fields where " + std::to_string(need) + " are needed") {}
};
template <typename... Fields>
constexpr size_t count_fields(const Fields&...) { return sizeof...(Fields); }
inline void require_fields(const msgpack::object& o, size_t need) {
  if (o.type == msgpack::type::ARRAY && o.via.array.size < need) throw MissingFields(o.via.array.size, need);
}
}  // namespace detail

// MSGPACK_DEFINE_ARRAY that refuses arrays shorter than `min_fields` (newer
// peers MAY append fields, so longer ones are read; fields appended in a
// later release are left at their defaults when an older peer sends fewer).
#define DUEQ_FIELDS_SINCE(min_fields, ...)                                                 \
  template <typename Packer>                                                              \
  void msgpack_pack(Packer& msgpack_pk) const {                                           \
    msgpack::type::make_define_array(__VA_ARGS__).msgpack_pack(msgpack_pk);               \
  }                                                                                       \
  void msgpack_unpack(const msgpack::object& msgpack_o) {                                 \
    ::dueq::proto::detail::require_fields(msgpack_o, min_fields);                         \
    msgpack::type::make_define_array(__VA_ARGS__).msgpack_unpack(msgpack_o);              \
  }

// The same, but the last field, `key` (a Bytes), is left out when it is
// empty: a job without a key is sent byte for byte as before keys, and a
// peer that predates them reads it as it always did.
#define DUEQ_FIELDS_KEY_LAST(min_fields, ...)                                              \
  template <typename Packer>                                                              \
  void msgpack_pack(Packer& msgpack_pk) const {                                           \
    if (key.data.empty()) {                                                               \
      msgpack::type::make_define_array(__VA_ARGS__).msgpack_pack(msgpack_pk);             \
    } else {                                                                              \
      msgpack::type::make_define_array(__VA_ARGS__, key).msgpack_pack(msgpack_pk);        \
    }                                                                                     \
  }                                                                                       \
  void msgpack_unpack(const msgpack::object& msgpack_o) {                                 \
    ::dueq::proto::detail::require_fields(msgpack_o, min_fields);                         \
    msgpack::type::make_define_array(__VA_ARGS__, key).msgpack_unpack(msgpack_o);         \
  }

// Every field is required.
#define DUEQ_FIELDS(...) DUEQ_FIELDS_SINCE(::dueq::proto::detail::count_fields(__VA_ARGS__), __VA_ARGS__)

// Opaque job payload bytes; encoded as msgpack bin (str is accepted too).
struct Bytes {
  std::string data;
  bool operator==(const Bytes&) const = default;
};

struct JobRef {
  std::string queue;
  std::string id;
  uint64_t token = 0;
  bool operator==(const JobRef&) const = default;
  DUEQ_FIELDS(queue, id, token)
};

struct Hello {
  static constexpr Type kType = Type::hello;
  std::string worker_id;
  std::vector<std::string> queues;
  uint32_t capacity = 0;       // jobs it can hold at once (running + buffered)
  std::vector<JobRef> held;    // jobs it holds now (after a reconnect)
  std::string host;
  uint32_t pid = 0;
  // Appended in 0.3 (absent from older workers' HELLO: every weight 1, not
  // strict). How the broker shares this worker's free slots among its
  // queues that have jobs: by `weights` (one per queue, 1..1000), or with
  // `strict` all to the first of them in the order listed.
  std::vector<uint32_t> weights;
  bool strict = false;
  static constexpr size_t kFieldsBefore03 = 6;
  DUEQ_FIELDS_SINCE(kFieldsBefore03, worker_id, queues, capacity, held, host, pid, weights, strict)
  static constexpr uint32_t kMaxWeight = 1000;
};

struct Welcome {
  static constexpr Type kType = Type::welcome;
  std::string broker_id;
  uint32_t heartbeat_ms = 0;
  // Appended in 0.3 (0 from an older broker: not told). Silence past
  // worker_timeout_ms declares the worker lost; a TASKS frame not confirmed
  // (RECEIVED, or the job listed as held) within delivery_timeout_ms goes
  // back to ready.
  uint32_t worker_timeout_ms = 0;
  uint32_t delivery_timeout_ms = 0;
  static constexpr size_t kFieldsBefore03 = 2;
  DUEQ_FIELDS_SINCE(kFieldsBefore03, broker_id, heartbeat_ms, worker_timeout_ms, delivery_timeout_ms)
};

// How a worker starts a task (Task::start_check).
enum class StartCheck : uint8_t {
  none = 0,      // at once
  announce = 1,  // after STARTING and the broker's go
  // as `announce`, and while no other task runs on this worker: a worker
  // died running it beside other jobs, so the next crash must tell which
  // one kills it.
  announce_alone = 2,
};
}  // namespace dueq::proto
MSGPACK_ADD_ENUM(dueq::proto::StartCheck);
namespace dueq::proto {

// One job handed to a worker (an item of a TASKS frame).
struct Task {
  std::string queue;
  std::string id;
  std::string type;
  Bytes payload;
  int64_t due_ms = 0;
  uint32_t attempt = 0;
  uint32_t max_attempts = 0;
  uint64_t token = 0;
  int64_t created_ms = 0;
  uint64_t payload_checksum = 0;  // payload_checksum(payload) as written at enqueue
  // StartCheck: an earlier delivery ended with its worker lost before a
  // handler was seen to start it, so this one starts only after STARTING and
  // the broker's go in START_REPLY (docs/protocol.md 3.3): a job that kills
  // its worker is charged for it, and its never-started neighbours are not.
  StartCheck start_check = StartCheck::none;
  Bytes key;  // the job's key, as bin: any bytes; left out when empty (so a broker before 0.7 sends 11 fields)
  // Appended in 0.8: the job must not start after this (Unix ms, worker's
  // clock; docs/jobs.md, "Start-by deadlines"); 0 = none, and then not sent
  // (nor the key, when it is empty).
  int64_t start_by_ms = 0;
  // Appended in 0.9: the W3C trace context the job was enqueued with
  // (docs/jobs.md, "Tracing"); "" = none, and then not sent (and the two
  // fields before it only as they are needed).
  std::string traceparent;
  std::string tracestate;
  static constexpr size_t kFieldsBefore07 = 11;
  template <typename Packer>
  void msgpack_pack(Packer& pk) const {
    if (!traceparent.empty())
      msgpack::type::make_define_array(queue, id, type, payload, due_ms, attempt, max_attempts, token, created_ms,
                                       payload_checksum, start_check, key, start_by_ms, traceparent, tracestate)
          .msgpack_pack(pk);
    else if (start_by_ms > 0)
      msgpack::type::make_define_array(queue, id, type, payload, due_ms, attempt, max_attempts, token, created_ms,
                                       payload_checksum, start_check, key, start_by_ms)
          .msgpack_pack(pk);
    else if (!key.data.empty())
      msgpack::type::make_define_array(queue, id, type, payload, due_ms, attempt, max_attempts, token, created_ms,
                                       payload_checksum, start_check, key)
          .msgpack_pack(pk);
    else
      msgpack::type::make_define_array(queue, id, type, payload, due_ms, attempt, max_attempts, token, created_ms,
                                       payload_checksum, start_check)
          .msgpack_pack(pk);
  }
  void msgpack_unpack(const msgpack::object& o) {
    detail::require_fields(o, kFieldsBefore07);
    msgpack::type::make_define_array(queue, id, type, payload, due_ms, attempt, max_attempts, token, created_ms,
                                     payload_checksum, start_check, key, start_by_ms, traceparent, tracestate)
        .msgpack_unpack(o);
  }
};


// The checksum a job's payload carries from its enqueue to the worker that
// runs it (XXH3, 64 bits): a payload changed on the way, in Redis or in any
// process between, is not run.
inline uint64_t payload_checksum(std::string_view payload) { return XXH3_64bits(payload.data(), payload.size()); }

// The broker hands a worker several jobs in one frame: one ZeroMQ message
// per dispatch instead of one per job.
struct Tasks {
  static constexpr Type kType = Type::tasks;
  std::vector<Task> items;
  uint64_t seq = 0;  // numbers this broker's TASKS frames (1, 2, ...); echoed in RECEIVED
  DUEQ_FIELDS(items, seq)
};

// A worker got the TASKS frame `seq`: from now on losing one of its jobs uses
// an attempt (docs/protocol.md 3.3).
struct Received {
  static constexpr Type kType = Type::received;
  uint64_t seq = 0;
  DUEQ_FIELDS(seq)
};

// A worker is about to start the handlers of these deliveries (each one
// sent with a start check) and waits for the broker's START_REPLY.
struct Starting {
  static constexpr Type kType = Type::starting;
  std::vector<JobRef> items;
  DUEQ_FIELDS(items)
};

// The broker recorded the start of `go` (losing them now uses an attempt):
// their handlers may run. `drop` are deliveries the sender no longer holds
// (re-delivered, finished or cancelled): it forgets them without a result.
struct StartReply {
  static constexpr Type kType = Type::start_reply;
  std::vector<JobRef> go;
  std::vector<JobRef> drop;
  DUEQ_FIELDS(go, drop)
};

// Bounds one TASKS frame well under kMaxFrameBytes whatever the payloads.
inline constexpr size_t kMaxTasksFrameBytes = 4u << 20;
// The same for a RESULTS frame whatever the error texts (10,000 results of
// 4 KiB errors would be 40 MiB, a frame the broker drops).
inline constexpr size_t kMaxResultsFrameBytes = 4u << 20;

struct Heartbeat {
  static constexpr Type kType = Type::heartbeat;
  std::vector<JobRef> held;
  uint32_t capacity = 0;
  bool draining = false;
  DUEQ_FIELDS(held, capacity, draining)
};

struct Pong {
  static constexpr Type kType = Type::pong;
  std::string broker_id;
  DUEQ_FIELDS(broker_id)
};

enum class Outcome : uint8_t {
  done = 0,          // handler succeeded
  failed = 1,        // handler failed; retry if attempts remain
  failed_final = 2,  // handler failed and asks for no retry (bad payload)
  cancelled = 3,     // handler stopped because the broker sent CANCEL
  snoozed = 4,       // handler asks to run again after JobResult::snooze_ms, no attempt used
  expired = 5,       // not started: its start-by deadline had passed when the worker would have started it
};
}  // namespace dueq::proto
MSGPACK_ADD_ENUM(dueq::proto::Outcome);
namespace dueq::proto {

struct JobResult {
  std::string queue;
  std::string id;
  uint64_t token = 0;
  Outcome outcome = Outcome::done;
  std::string error;
  // Appended in 0.8, sent with `snoozed` only (left out, it reads 0: due
  // again at once): how long after the broker applies the result the job is
  // due again, 0..10 years. Other results keep their five fields, byte for
  // byte as before.
  int64_t snooze_ms = 0;
  // Appended in 0.9, sent with `done` only and only when not empty (then
  // after a snooze_ms of 0): what the handler returned, any bytes, at most
  // kMaxResultBytes; kept with the finished job for its retention.
  Bytes result;
  static constexpr size_t kMaxResultBytes = 64u << 10;
  static constexpr size_t kFieldsBefore08 = 5;
  static constexpr int64_t kMaxSnoozeMs = 10LL * 366 * 86'400'000;
  template <typename Packer>
  void msgpack_pack(Packer& pk) const {
    const int64_t no_snooze = 0;
    if (outcome == Outcome::done && !result.data.empty())
      msgpack::type::make_define_array(queue, id, token, outcome, error, no_snooze, result).msgpack_pack(pk);
    else if (outcome == Outcome::snoozed) msgpack::type::make_define_array(queue, id, token, outcome, error, snooze_ms).msgpack_pack(pk);
    else msgpack::type::make_define_array(queue, id, token, outcome, error).msgpack_pack(pk);
  }
  void msgpack_unpack(const msgpack::object& o) {
    detail::require_fields(o, kFieldsBefore08);
    msgpack::type::make_define_array(queue, id, token, outcome, error, snooze_ms, result).msgpack_unpack(o);
  }
};

struct Results {
  static constexpr Type kType = Type::results;
  std::vector<JobResult> items;
  DUEQ_FIELDS(items)
};

// The broker has applied these results in Redis (or found them stale): the
// worker forgets them. Unconfirmed results are resent after a reconnect.
struct Confirm {
  static constexpr Type kType = Type::confirm;
  std::vector<JobRef> items;
  DUEQ_FIELDS(items)
};

// The broker asks a worker to stop one delivery (a user cancelled the job).
struct Cancel {
  static constexpr Type kType = Type::cancel;
  JobRef job;
  DUEQ_FIELDS(job)
};

// A worker leaving: the jobs it received but did not start go back at once.
struct Bye {
  static constexpr Type kType = Type::bye;
  std::vector<JobRef> unstarted;
  DUEQ_FIELDS(unstarted)
};

// A worker that stays returns buffered jobs it cannot start soon (its
// handlers got slower): they go back at once, no attempt used.
struct HandBack {
  static constexpr Type kType = Type::hand_back;
  std::vector<JobRef> unstarted;
  DUEQ_FIELDS(unstarted)
};

// How far a running job got, as its handler last said: the worker sends
// the latest report of each job that made one since its last PROGRESS,
// with its heartbeats (many reports between two cost one item).
struct ProgressItem {
  static constexpr uint32_t kMaxPercent = 100;
  static constexpr size_t kMaxTextBytes = 256;
  std::string queue;
  std::string id;
  uint64_t token = 0;
  uint32_t percent = 0;  // 0..kMaxPercent
  Bytes text;            // any bytes, at most kMaxTextBytes
  DUEQ_FIELDS(queue, id, token, percent, text)
};

struct Progress {
  static constexpr Type kType = Type::progress;
  std::vector<ProgressItem> items;
  DUEQ_FIELDS(items)
};

// How long a unique job holds its unique key (docs/keys.md).
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

struct ErrorFrame {
  static constexpr Type kType = Type::error;
  uint64_t request_id = 0;
  std::string code;
  std::string message;
  uint32_t retry_after_ms = 0;
  DUEQ_FIELDS(request_id, code, message, retry_after_ms)
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

struct WaitReply {
  static constexpr Type kType = Type::wait_reply;
  uint64_t request_id = 0;
  std::string state;        // done, dead, cancelled; pending (not ended by the timeout); unknown (no such job)
  int64_t finished_ms = 0;  // when it ended (Unix ms); 0 unless it ended
  Bytes result;             // done: what its handler returned (may be empty)
  std::string error;        // dead: why (its last error)
  DUEQ_FIELDS(request_id, state, finished_ms, result, error)
};

using Frame = std::variant<Hello, Welcome, Tasks, Received, Heartbeat, Pong, Results, Confirm, Cancel, Bye, Enqueue, EnqueueReply,
                           StatsRequest, StatsReply, JobRequest, JobReply, AdminRequest, AdminReply, ErrorFrame, Starting,
                           StartReply, HandBack, WaitRequest, WaitReply, Progress>;

// The most values (array elements and map keys and values, nested ones
// included) a frame may hold. A full ENQUEUE of 10,000 jobs holds about
// 90,000, or 100,000 when every job has a key; replies to clients get more: a STATS_REPLY of max_queues' most,
// 100,000 queues, holds about 2.2 million (unit-tested).
inline constexpr size_t kMaxFrameValues = 110'000;
inline constexpr size_t kMaxReplyValues = 4'000'000;

// The checks decode() makes of a frame's fields, for a sender to make
// before it sends one.
Result<void> validate(const Frame& frame);

// Decodes and validates one frame. Never throws; every problem is an Error
// with code bad_frame and a message naming what was wrong. Work is bounded by
// the frame size and `max_values`, checked before anything is allocated.
Result<Frame> decode(std::string_view bytes, size_t max_values = kMaxFrameValues);

template <typename T>
std::string encode(const T& body) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  packer.pack_array(3);
  packer.pack(kVersion);
  packer.pack(static_cast<uint8_t>(T::kType));
  packer.pack(body);
  return std::string(buffer.data(), buffer.size());
}

const char* type_name(Type type);

inline Type type_of(const Frame& frame) {
  return std::visit([](const auto& f) { return std::decay_t<decltype(f)>::kType; }, frame);
}

// The request id of a frame decode() refused, when its first bytes still
// read as a request ([version, type, [request_id, ...]] with a request
// type): the broker's ERROR then names it, and the client fails that request
// alone. 0 when they do not. Reads a few dozen bytes at most.
uint64_t peek_request_id(std::string_view bytes);

// The request id a reply to `frame` carries (0 for frames that are not requests).
inline uint64_t request_id_of(const Frame& frame) {
  return std::visit(
      [](const auto& f) -> uint64_t {
        if constexpr (requires { f.request_id; }) return f.request_id;
        else return 0;
      },
      frame);
}

}  // namespace dueq::proto

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <>
  struct convert<dueq::proto::Bytes> {
    const msgpack::object& operator()(const msgpack::object& o, dueq::proto::Bytes& v) const {
      if (o.type == msgpack::type::BIN) v.data.assign(o.via.bin.ptr, o.via.bin.size);
      else if (o.type == msgpack::type::STR) v.data.assign(o.via.str.ptr, o.via.str.size);
      else throw msgpack::type_error();
      return o;
    }
  };

  template <>
  struct pack<dueq::proto::Bytes> {
    template <typename Stream>
    packer<Stream>& operator()(msgpack::packer<Stream>& o, const dueq::proto::Bytes& v) const {
      o.pack_bin(static_cast<uint32_t>(v.data.size()));
      o.pack_bin_body(v.data.data(), static_cast<uint32_t>(v.data.size()));
      return o;
    }
  };

  }  // namespace adaptor
}
}  // namespace msgpack
