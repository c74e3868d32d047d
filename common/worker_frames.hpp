#pragma once
// The frames between the broker and its workers (docs/protocol.md): HELLO
// and WELCOME, TASKS and what a worker says of them (RECEIVED, STARTING,
// RESULTS, PROGRESS, HAND_BACK), heartbeats, CONFIRM, CANCEL and BYE.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <xxhash.h>

#include "common/protocol_fields.hpp"

namespace dueq::proto {

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


}  // namespace dueq::proto
