#pragma once
// Every Redis key dueq uses is built here. Keys of one queue share the hash
// tag {queue}, so a queue's scripts touch one cluster slot.
//
// Per-job data lives in a few hashes per queue, keyed by job id, rather than
// in one hash per job: a script then reads or writes a whole batch of jobs
// with one variadic command (HMGET/HSET/HDEL), which is what makes batching
// pay off in Redis, and a job costs one hash entry instead of a key.
#include <string>

namespace dueq::broker {

struct QueueKeys {
  explicit QueueKeys(const std::string& queue)
      : scheduled(key(queue, "scheduled")),
        ready(key(queue, "ready")),
        leased(key(queue, "leased")),
        dead(key(queue, "dead")),
        done(key(queue, "done")),
        cancelled(key(queue, "cancelled")),
        stats(key(queue, "stats")),
        jobs(key(queue, "jobs")),
        tokens(key(queue, "tokens")),
        attempts(key(queue, "attempts")),
        errors(key(queue, "errors")),
        error_logs(key(queue, "errlogs")),
        cancel_requested(key(queue, "cancelreq")) {}

  static std::string key(const std::string& queue, const char* what) { return "dueq:{" + queue + "}:" + what; }

  std::string scheduled;         // zset id -> due ms
  std::string ready;             // zset id -> due ms: due, waiting for a worker
  std::string leased;            // zset id -> lease deadline ms
  std::string dead;              // zset id -> time of death ms
  std::string done;              // zset id -> finished ms, kept for the retention period
  std::string cancelled;         // zset id -> finished ms, kept for the retention period
  std::string stats;             // hash of counters (and the token sequence)
  std::string jobs;              // hash id -> job record (broker/job_record.hpp) while not finished
  std::string tokens;            // hash id -> fencing token; present exactly while the job is leased
  std::string attempts;          // hash id -> failed deliveries (absent = 0); lease adds one for the running one
  std::string errors;            // hash id -> last error
  std::string error_logs;        // hash id -> one line per failed attempt
  std::string cancel_requested;  // set of leased ids a user asked to cancel
};

// The set of queue names the broker has seen (for restarts and `dueq stats`).
inline const std::string kQueuesKey = "dueq:queues";

}  // namespace dueq::broker
