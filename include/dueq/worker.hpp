#pragma once
// dueq worker library: connect to a dueq broker, receive jobs of the queues
// you serve, run a handler per job type, and let the library take care of
// heartbeats, results, resending after reconnects and graceful draining.
//
//   dueq::Worker worker({.broker = "tcp://broker:7600", .queues = {"emails"}, .concurrency = 8});
//   worker.handle("send", [](const dueq::Job& job) { ...; return dueq::HandlerResult::done(); });
//   return worker.run();   // until stop() is called (e.g. from a SIGTERM handler thread)
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dueq {

namespace worker {
class ProgressBoard;
}

struct Job {
  std::string queue;
  std::string id;
  std::string type;
  std::string payload;
  int64_t due_ms = 0;        // when it was due (Unix ms)
  uint32_t attempt = 0;      // 1 on the first delivery
  uint32_t max_attempts = 0;
  int64_t created_ms = 0;    // when the broker accepted it
  int64_t received_ms = 0;   // when this worker received it
  // Becomes true when the handler should stop early: a user cancelled the
  // job, or the worker's drain timeout ran out. Long handlers should poll it.
  const std::atomic<bool>* cancelled = nullptr;
  // Fencing token of this delivery: distinct for every delivery of a job,
  // useful as an idempotency key for side effects.
  uint64_t token = 0;
  std::string key;  // the key it was enqueued with ("" = none; docs/keys.md)
  // Its start-by deadline (Unix ms; 0 = none): the worker does not start it
  // later than this by its own clock, and reports it expired instead.
  int64_t start_by_ms = 0;
  // The W3C trace context it was enqueued with ("" = none; docs/jobs.md,
  // "Tracing"): start the handler's span as a child of `traceparent`.
  std::string traceparent;
  std::string tracestate;
  // Where progress() reports go (set by the worker; null: nowhere).
  worker::ProgressBoard* progress_board = nullptr;

  // Tells how far the handler got: `percent` (clamped to 0..100) and a
  // short text (any bytes, cut to 256). Cheap to call often: the latest
  // report goes to the broker with the worker's next heartbeat, and `dueq
  // job`, `dueq workers` and the dashboard show it while the job runs.
  void progress(int64_t percent, std::string_view text = {}) const;
};

struct HandlerResult {
  enum class Status { done, failed, failed_final, snoozed };
  Status status = Status::done;
  std::string error;  // readable reason, kept with the job
  int64_t snooze_ms = 0;  // snoozed: due again this long after the broker hears of it
  // Done: what the handler returns, any bytes, at most 64 KiB (larger: the
  // job dies with why). Kept with the finished job for its queue's
  // done_retention; `dueq job`, Client::wait and `dueq wait` show it.
  std::string result;

  static HandlerResult done() { return {}; }
  static HandlerResult done(std::string result) { return {Status::done, {}, 0, std::move(result)}; }
  // Failed: retried with backoff while attempts remain.
  static HandlerResult failed(std::string reason) { return {Status::failed, std::move(reason)}; }
  // Failed for good (e.g. a payload that can never be processed): dead-lettered.
  static HandlerResult failed_final(std::string reason) { return {Status::failed_final, std::move(reason)}; }
  // Not now: run it again after `delay` (0 .. 10 years; clamped), with no
  // attempt used and nothing added to its error log (a rate limit said
  // "later", a resource is busy). A job snoozed more than its queue's
  // max_snoozes times (100 by default) goes dead instead.
  static HandlerResult snooze(std::chrono::milliseconds delay, std::string reason = {}) {
    return {Status::snoozed, std::move(reason), delay.count()};
  }
  // The same until a wall-clock time (Unix ms): the delay from this
  // machine's clock, so the broker's clock does not need to agree with it.
  static HandlerResult snooze_until(int64_t unix_ms, std::string reason = {}) {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch());
    return snooze(std::chrono::milliseconds(unix_ms) - now, std::move(reason));
  }
};

using Handler = std::function<HandlerResult(const Job&)>;

struct WorkerOptions {
  std::string broker = "tcp://127.0.0.1:7600";  // the broker's --listen endpoint, or several separated by commas (a leader and its standbys)
  // Queues to serve, each "NAME" or "NAME:WEIGHT" (1..1000): the broker
  // gives this worker's free slots to its queues that have jobs in
  // proportion to their weights (all 1 when none is given) ...
  std::vector<std::string> queues;
  // ... or, strict, all to the first of them in this order.
  bool strict_priority = false;
  unsigned concurrency = 1;         // handlers running at once
  // Extra jobs buffered beyond the running ones. 0: adapts to the measured
  // handler time, from `concurrency` for long handlers up to 1,000 jobs in
  // all for very short ones (enough to keep handlers busy while the broker
  // refills their slots).
  unsigned prefetch = 0;
  int64_t drain_timeout_ms = 30'000;  // on stop(): how long running jobs may finish
  // A log line at info when each job starts and when it ends (its type,
  // attempt, time taken and outcome); false, or a log level above info,
  // quiets them.
  bool log_jobs = true;
  std::string worker_id;            // default: host-pid-random
  // CurveZMQ (docs/security.md): the broker's public key (Z85 or its .pub
  // file) and this worker's key file (`dueq keygen`). Both empty: plaintext.
  std::string broker_key;
  std::string key_file;
};

class Worker {
 public:
  explicit Worker(WorkerOptions options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Registers the handler for a job type; "*" handles every type without
  // a handler of its own. Call before run().
  void handle(const std::string& type, Handler handler);

  // Runs until stop(); returns 0 after a clean drain, non-zero on a setup error.
  int run();

  // Thread-safe and signal-thread-safe: take no new jobs, let running ones
  // finish (up to drain_timeout_ms), hand the rest back, then run() returns.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dueq
