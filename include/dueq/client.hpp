#pragma once
// dueq producer client: enqueue jobs and read queue state through the broker.
// Thread-safe: one Client (one connection) can serve every thread of a
// process, and the *_async calls keep many requests outstanding on it.
//
//   dueq::Client client("tcp://broker:7600");
//   auto r = client.enqueue({.queue = "emails", .type = "send", .payload = "{...}", .due_ms = dueq::Client::in_ms(30'000)});
//   if (!r) std::cerr << r.error().message;
//
//   auto pending = client.enqueue_async({.queue = "emails", .type = "send"});
//   ...                                  // other work, or more enqueues
//   auto result = pending.get();         // the same result enqueue() gives
//
//   client.enqueue_async({.queue = "emails", .type = "send"},
//                        [](auto result) { /* on the client's I/O thread */ });
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dueq/job.hpp"

namespace dueq {

// How long a unique job holds its unique key (docs/keys.md).
enum class UniqueUntil {
  none,     // not unique
  waiting,  // while scheduled or ready: until it is first leased
  started,  // until a worker announces its start
  done,     // until it is done (or dead, or cancelled)
  period,   // for unique_for_ms after its enqueue (at most one per period), unless it dies or is cancelled first
  debounce, // while scheduled: a new job with its unique key gives it its payload and due time instead, at most
            // unique_for_ms after this job's enqueue (run once, after the last of a burst)
};

struct JobSpec {
  std::string queue;
  std::string type;
  std::string payload;
  std::string id;             // empty: a new id is generated; a retry with the same id within the queue's
                              // duplicate_window (30 s by default; the client resends for 15 s) makes no second job
  int64_t due_ms = 0;         // Unix ms when the job is due; 0 = now
  uint32_t max_attempts = 0;  // 0 = the queue's default
  int64_t backoff_base_ms = 0;  // retry n waits random(0, min(cap, base * 2^(n-1))); 0 = the queue's
  int64_t backoff_cap_ms = 0;   // 0 = the queue's
  // The job's key (docs/keys.md): a tenant, an account, a document; up to
  // 128 bytes of any kind. A queue with key limits runs at most so many
  // jobs of one key at a time (one, in order, when it is ordered). "" = none.
  std::string key;
  // A unique job (docs/keys.md): while it holds `unique_key` (1..128 bytes
  // of any kind), a new job of the queue with the same unique key is
  // answered duplicate with this job's id (EnqueueResult::existing_id).
  std::string unique_key;
  UniqueUntil unique_until = UniqueUntil::none;
  int64_t unique_for_ms = 0;  // with UniqueUntil::period: how long the hold lasts
  // A start-by deadline (Unix ms; 0 = none): the job never starts after it,
  // and goes dead with the reason "expired" once it has passed unstarted
  // (docs/jobs.md). One before due_ms is rejected; one already past makes
  // the job expire when first leased.
  int64_t start_by_ms = 0;
  // A W3C trace context (docs/jobs.md, "Tracing"): the caller's span, kept
  // with the job through delays, retries, dead letters and replay and
  // handed to its handler (Job::traceparent). "" = none.
  std::string traceparent;
  std::string tracestate;  // only with a traceparent
};

struct EnqueueResult {
  enum class Status { accepted, duplicate, rejected, overloaded };
  std::string id;
  Status status = Status::accepted;
  std::string reason;            // for rejected and overloaded
  uint32_t retry_after_ms = 0;   // for overloaded: when to try again
  std::string existing_id;       // duplicate by a unique key: the job that holds it
};

// Flows and batches (docs/flows.md). A flow is a tree of jobs of one queue:
// each parent runs once all its children settled (done, dead or
// cancelled), at its own due time if that is later. A batch is a set of
// jobs with callbacks: on_success runs once every member is done,
// on_complete once every member settled, both after the batch is closed.
enum class ChildFailure {
  fail_parent,  // the child dead or cancelled: its parent goes dead, and its own parent hears of it
  ignore,       // the parent runs as if the child were done
  proceed,      // the parent runs, and sees the child failed among its children (Client::children)
};
struct FlowJob {
  JobSpec job;  // its queue is the flow's: left empty, or the same; not unique
  ChildFailure on_failure = ChildFailure::fail_parent;  // how its failure reaches its parent (not used for the root)
  std::vector<FlowJob> children;
};
struct GroupResult {
  enum class Status { accepted, duplicate, rejected, overloaded, no_batch, batch_closed, batch_exists, batch_full };
  Status status = Status::accepted;
  std::string reason;
  std::vector<std::string> ids;  // every job's id as sent (a flow: parents before their children, depth first)
  int64_t job_index = -1;        // duplicate or rejected: the job at fault, in `ids` (-1: the request)
  uint32_t retry_after_ms = 0;   // overloaded: when to try again
};
struct BatchCallbacks {
  std::optional<JobSpec> on_success;   // runs once every member is done (cancelled if one is not)
  std::optional<JobSpec> on_complete;  // runs once every member settled
};
// A flow's or a batch's status and a page of its members.
struct GroupView {
  std::string kind;   // "flow" or "batch"
  std::string state;  // waiting, settled, failed (a child failed the parent) or cancelled (the parent was)
  bool open = false;  // a batch that takes more members
  int64_t total = 0, pending = 0, done = 0, dead = 0, cancelled = 0;
  std::string parent, on_success, on_complete;  // the held jobs' ids ("" = none)
  int64_t settled_ms = 0;                       // 0 while it has not
  struct Member {
    std::string id;
    std::string state;   // scheduled, held, ready, running, done, dead, cancelled, or "" once forgotten
    std::string result;  // done: what its handler returned
    std::string error;   // dead: its last error
  };
  std::vector<Member> members;
  std::string next;  // where the next page starts ("" after the last)
};
struct ClientError {
  std::string code;     // "timeout", "unavailable", "overloaded", "refused", "handshake", "bad_argument", ...
  std::string message;
  uint32_t retry_after_ms = 0;  // set when the broker asks to retry later
};

struct QueueStats {
  std::string queue;
  int64_t scheduled = 0, waiting = 0, in_flight = 0, done = 0, dead = 0;
  int64_t accepted = 0, retried = 0, stale_acks = 0, next_due_ms = 0;
  int64_t cancelled = 0, purged = 0;
  // 0 from a broker older than 0.2:
  int64_t died = 0;                 // jobs that went to the dead-letter set, ever
  int64_t unconfirmed = 0;          // of `retried`, deliveries that went back unstarted
  int64_t replayed = 0;             // dead letters replayed
  int64_t stale_extends = 0;        // lease renewals of deliveries no longer current
  int64_t oldest_ready_due_ms = 0;  // due time of the longest-waiting ready job; 0 = none waits
  // 0 from a broker older than 0.3:
  int64_t paused_since_ms = 0;      // when `dueq pause` paused it; 0 = it runs
  double rate_limit = 0;            // jobs started per second at most; 0 = none
  int64_t rate_burst = 0;
  int64_t concurrency_limit = 0;    // jobs running at once across all workers at most; 0 = none
  // 0 from a broker older than 0.6:
  int64_t history_kept = 0;         // finished jobs whose whole document is kept (history_retention)
  int64_t history_trimmed = 0;      // kept documents removed by age or count, ever
  // 0 from a broker older than 0.7 (docs/keys.md):
  int64_t keys_running = 0;         // keys holding a turn
  int64_t waiting_for_key = 0;      // of `waiting`, jobs parked until their key has a turn
  // The (at most 10) keys with the most jobs waiting for a turn, most
  // first: key (any bytes) and how many.
  std::vector<std::pair<std::string, int64_t>> top_keys;
  // 0 from a broker older than 0.8 (docs/jobs.md):
  int64_t snoozed = 0;              // snoozes its handlers asked for, ever
  int64_t expired = 0;              // of `died`, jobs dead unstarted past their start-by deadline, ever
};

// Every queue's counts, and how many workers the broker has registered
// (joined and neither gone nor declared dead).
struct BrokerStats {
  std::vector<QueueStats> queues;
  uint32_t workers = 0;
};

// Operator commands (see `dueq --help`): op is "cancel", "dead_list",
// "replay", "purge", "audit", "scheduled", "pause", "resume", "cron_add",
// "cron_list" or "cron_remove".
struct AdminCommand {
  std::string op;
  std::string queue;              // "" = every queue where the op allows it
  std::vector<std::string> ids;
  int64_t older_than_ms = 0;      // purge by age
  uint32_t limit = 0;             // dead_list: at most this many in all (0 = 1000)
  // cron_add: name, schedule, time_zone, queue, type, payload, misfire,
  // max_attempts; cron_remove: name; dead_list: after (the `next` of the
  // page before).
  std::map<std::string, std::string> args = {};
};

struct AdminResult {
  std::vector<std::map<std::string, std::string>> rows;
  std::string summary;
  std::string next;  // dead_list: where the next page starts (args "after"); "" when this was the last
};

// How a job ended, as Client::wait finds it.
struct JobEnd {
  enum class State { done, dead, cancelled, pending, unknown };
  State state = State::pending;  // pending: not ended within the wait; unknown: no queue holds it
  int64_t finished_ms = 0;       // when it ended (Unix ms)
  std::string result;            // done: what its handler returned
  std::string error;             // dead: why
};

struct ClientOptions {
  int64_t timeout_ms = 5'000;  // per attempt
  // A request unanswered in time is sent again (safe: same job ids). With
  // several endpoints, each timeout (a request's last attempt too) moves
  // the connection to the next one.
  int attempts = 3;
  // CurveZMQ (docs/security.md): the broker's public key (40 Z85 characters,
  // or the path of its .pub file) and this client's key file from `dueq
  // keygen`. Both empty: plaintext. The constructor throws
  // std::invalid_argument when they cannot be read.
  std::string broker_key;
  std::string key_file;
  // > 0: while no link to a broker was ever up (or since it went down),
  // requests fail after this long with what is wrong instead of waiting out
  // their attempts: "unavailable" (nothing listens, no answer; at once when
  // the broker turns the connection away at its open-file limit), "refused"
  // (the broker refused this key: at once) or "handshake" (a wrong broker
  // key, or CURVE on one side only). 0: they wait, as for a broker that is
  // restarting.
  int64_t connect_timeout_ms = 0;
  // A standby's not_leader names the leader: go there too (it joins the
  // endpoints given), so that a client given only a standby reaches the
  // leader. false: a standby's refusal is the answer.
  bool follow_leader = true;
};

class Client {
 public:
  // `broker_endpoint`: one endpoint, or several separated by commas (a
  // leader and its standbys: the client finds the one that leads). Throws
  // std::invalid_argument for a malformed list.
  explicit Client(const std::string& broker_endpoint, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  std::expected<EnqueueResult, ClientError> enqueue(JobSpec job);
  // Up to 10,000 jobs per call; results are in the order of `jobs`.
  std::expected<std::vector<EnqueueResult>, ClientError> enqueue_batch(std::vector<JobSpec> jobs);

  // The same without waiting: the future is ready when the broker answered,
  // or with the error once every attempt timed out or the Client was
  // destroyed. To retry after an error without making a second job, give
  // the job its id (JobSpec::id) before the first call.
  std::future<std::expected<EnqueueResult, ClientError>> enqueue_async(JobSpec job);
  std::future<std::expected<std::vector<EnqueueResult>, ClientError>> enqueue_batch_async(std::vector<JobSpec> jobs);

  // The same with a callback instead of a future, for event loops: `on_done`
  // runs once, on the Client's I/O thread, with what the future would hold
  // (a request refused before it was sent, too). An empty `on_done` throws
  // std::invalid_argument.
  // It should return quickly (other answers wait behind it) and must not
  // throw or destroy the Client. It may call the *_async methods again:
  // that is how a loop keeps N requests outstanding without a thread
  // waiting on a future. A blocking call (enqueue, stats, ...) made from it
  // is refused with "bad_argument" rather than waiting forever for the
  // thread it runs on. Calls made while the Client is being destroyed are
  // answered "unavailable" at once.
  using EnqueueCallback = std::function<void(std::expected<EnqueueResult, ClientError>)>;
  using EnqueueBatchCallback = std::function<void(std::expected<std::vector<EnqueueResult>, ClientError>)>;
  void enqueue_async(JobSpec job, EnqueueCallback on_done);
  void enqueue_batch_async(std::vector<JobSpec> jobs, EnqueueBatchCallback on_done);
  std::expected<std::vector<QueueStats>, ClientError> stats();
  std::expected<BrokerStats, ClientError> broker_stats();
  // The job's stored fields (docs/protocol.md, JOB_REPLY), or nullopt when no queue has it.
  std::expected<std::optional<std::map<std::string, std::string>>, ClientError> job(const std::string& id,
                                                                                     const std::string& queue = "");
  // The same as the public job document (docs/jobs.md; job_json prints it).
  std::expected<std::optional<JobDocument>, ClientError> job_document(const std::string& id, const std::string& queue = "");

  std::expected<AdminResult, ClientError> admin(const AdminCommand& command);

  // Changing one waiting (scheduled or ready) job by id (docs/jobs.md,
  // "Changing a waiting job"); its id, attempts, key and unique hold stay.
  // A job that is running or finished is refused with code "conflict", one
  // that no queue holds with "not_found".
  // The new due time (at or before now: ready at once, as run_now).
  std::expected<void, ClientError> reschedule(const std::string& id, int64_t due_ms, const std::string& queue = "");
  std::expected<void, ClientError> run_now(const std::string& id, const std::string& queue = "");
  // Replaces its payload (at most 1 MiB) if its version
  // is still `version` (JobDocument::version, as read): "conflict" when
  // anything changed it since. Returns its new version.
  std::expected<std::string, ClientError> edit_payload(const std::string& id, std::string payload,
                                                       const std::string& version, const std::string& queue = "");

  // Waits up to `timeout` for job `id` of `queue` to end: done (with its
  // result), dead (with why) or cancelled; `pending` when it has not by
  // then, `unknown` when the queue holds no such job (nor its end: a done
  // job is kept for its queue's done_retention). The broker answers as the
  // ack is applied; across a broker restart or a take-over the wait goes
  // on at the broker that leads, finding an end that came meanwhile.
  std::expected<JobEnd, ClientError> wait(const std::string& id, const std::string& queue, std::chrono::milliseconds timeout);

  // Flows and batches (docs/flows.md). Each call is stored whole or not at
  // all (at most 1,000 jobs, a flow at most 4 levels deep): a retry of one
  // accepted before is answered duplicate, naming its first job. Ids are
  // made where empty.
  std::expected<GroupResult, ClientError> enqueue_flow(const std::string& queue, FlowJob root);
  std::expected<GroupResult, ClientError> open_batch(const std::string& queue, const std::string& batch_id,
                                                     BatchCallbacks callbacks, std::vector<JobSpec> jobs = {},
                                                     bool close = false);
  std::expected<GroupResult, ClientError> add_to_batch(const std::string& queue, const std::string& batch_id,
                                                       std::vector<JobSpec> jobs, bool close = false);
  std::expected<GroupResult, ClientError> close_batch(const std::string& queue, const std::string& batch_id);
  // A batch's status, or a flow parent's with its children's states and
  // results, a page (up to `limit`, at most 100) at a time from `after`
  // (the last page's `next`). Any key that may use the queue may read it.
  std::expected<GroupView, ClientError> batch_status(const std::string& queue, const std::string& batch_id,
                                                     const std::string& after = "", uint32_t limit = 50);
  std::expected<GroupView, ClientError> children(const std::string& queue, const std::string& parent_id,
                                                 const std::string& after = "", uint32_t limit = 50);

  static int64_t in_ms(int64_t delay_ms);  // now + delay, as a due time

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dueq
