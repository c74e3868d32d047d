#pragma once
// Every Redis key dueq uses is built here. Keys of one queue share the hash
// tag {queue}, so a queue's scripts touch one cluster slot.
//
// Per-job data lives in a few hashes per queue, keyed by job id, rather than
// in one hash per job: a script then reads or writes a whole batch of jobs
// with one variadic command (HMGET/HSET/HDEL), which is what makes batching
// pay off in Redis, and a job costs one hash entry instead of a key.
//
// Jobs due in the future are kept apart, in kSchedulePartitions small
// partitions per queue chosen by a hash of the id (broker/store/schedule_partition.hpp): `schedule:<p>` (zset id ->
// due ms) and `schedule:<p>:jobs` (hash id -> record). Small enough to stay
// listpack-encoded in Redis, they cost about 230 bytes per delayed job where
// one big sorted set plus one big hash cost about 360 (a dict entry and a
// skiplist node per job). `schedule` (zset partition -> a lower bound of its
// earliest due ms) tells promote which partitions to look at. Lua scripts
// build a partition's keys from the `schedule` key by the same rule as
// schedule_partition_key / schedule_jobs_key below, and the schedule filter's
// (`schedule:filter`, which spares an enqueue most looks into a partition).
#include <cstdint>
#include <string>
#include <string_view>

namespace dueq::broker {

struct QueueKeys {
  explicit QueueKeys(const std::string& queue)
      : schedule(key(queue, "schedule")),
        schedule_filter(schedule + ":filter"),
        legacy_scheduled(key(queue, "scheduled")),
        ready(key(queue, "ready")),
        leased(key(queue, "leased")),
        dead(key(queue, "dead")),
        done(key(queue, "done")),
        cancelled(key(queue, "cancelled")),
        history(key(queue, "history")),
        stats(key(queue, "stats")),
        jobs(key(queue, "jobs")),
        tokens(key(queue, "tokens")),
        attempts(key(queue, "attempts")),
        errors(key(queue, "errors")),
        error_logs(key(queue, "errlogs")),
        cancel_requested(key(queue, "cancelreq")),
        started(key(queue, "started")),
        unconfirmed(key(queue, "unconfirmed")),
        snoozes(key(queue, "snoozes")),
        results(key(queue, "results")),
        epoch(key(queue, "epoch")),
        paused(key(queue, "paused")),
        rate(key(queue, "rate")),
        cron(key(queue, "cron")),
        key_held(key(queue, "keys:held")),
        key_running(key(queue, "keys:running")),
        key_parked(key(queue, "keys:parked")),
        key_limits(key(queue, "keys:limits")),
        unique(key(queue, "unique")),
        fair(key(queue, "fair")),
        key_weights(key(queue, "keys:weights")),
        key_rates(key(queue, "keys:rates")),
        key_tats(key(queue, "keys:tats")),
        key_wakes(key(queue, "keys:wakes")),
        groups(key(queue, "groups")) {}

  static std::string key(const std::string& queue, const char* what) { return "dueq:{" + queue + "}:" + what; }

  std::string schedule;          // zset partition -> lower bound of its earliest due ms (see above)
  std::string schedule_filter;   // prefix of the filter's chunks: strings of 8-bit counters, scheduled ids per (partition, id tail) (lua/lib/schedule_filter.lua)
  std::string legacy_scheduled;  // zset id -> due ms of stores written before the partitioned schedule
  std::string ready;             // zset id -> due ms: due, waiting for a worker
  std::string leased;            // zset id -> lease deadline ms
  std::string dead;              // zset id -> time of death ms
  std::string done;              // zset id -> finished ms, kept for the retention period
  std::string cancelled;         // zset id -> finished ms, kept for the retention period
  std::string history;           // hash id -> a done or cancelled job's entry (lua/lib/history.lua), kept for history_retention
  std::string stats;             // hash of counters (and the token sequence)
  std::string jobs;              // hash id -> job record (broker/store/job_record.hpp) while not finished
  std::string tokens;            // hash id -> fencing token; present exactly while the job is leased
  std::string attempts;          // hash id -> failed deliveries (absent = 0); lease adds one for the running one
  std::string errors;            // hash id -> last error
  std::string error_logs;        // hash id -> one line per failed attempt
  std::string cancel_requested;  // set of leased ids a user asked to cancel
  std::string started;           // set of leased ids whose start the broker recorded (extend.lua "started" writes it)
  std::string unconfirmed;       // hash id -> deliveries that ended unstarted; its next worker announces the start (lua/lib/lost_delivery.lua)
  std::string snoozes;           // hash id -> times its handler snoozed it (lua/nack.lua); kept while it is dead
  std::string results;           // hash id -> what a done job's handler returned (lua/ack.lua); goes with its done entry (lua/sweep.lua)
  std::string epoch;             // string: the epoch of the leader that may write this queue (lua/lib/fence.lua)
  std::string paused;            // string: ms when `dueq pause` paused the queue; absent while it runs
  std::string rate;              // hash: the rate limit's token bucket (tokens, at ms; lua/lease.lua)
  std::string cron;              // hash: periodic entry -> "<last tick enqueued ms>:<fingerprint>" (lua/cron_tick.lua)
  // Per-key limits (lua/lib/keys.lua):
  std::string key_held;          // hash id -> "o"|"l" + key: jobs holding a turn of their key
  std::string key_running;       // hash key -> turns held
  std::string key_parked;        // zset (scores 0) of parked ready jobs: key, due, id
  std::string key_limits;        // hash key -> its own limit (`dueq key limit`)
  // Unique jobs (lua/lib/unique.lua): hash id -> mode + unique key of the
  // jobs holding one; unique + ":" + K, the holder of unique key K.
  std::string unique;
  // Fair dispatch (lua/lib/fair.lua): string, the virtual time, present while
  // the queue is fair (fair + ":finish", zset flow -> finish tag); hash key ->
  // its own weight (`dueq key weight`).
  std::string fair;
  std::string key_weights;
  // Rate limits per key (lua/lib/keys.lua): hash key -> its own jobs per
  // second (`dueq key rate`); zset key -> when its bucket is full again (GCRA);
  // zset key -> when a job parked for its rate may run.
  std::string key_rates;
  std::string key_tats;
  std::string key_wakes;
  // Flows and batches (lua/lib/group.lua): hash "<group>:<field>" of each
  // group's state and counts; beside it groups + ":of" (hash member id ->
  // policy, partition and group), ":waiting" (hash held job id -> its due,
  // partition, role and group), ":settled" (zset group -> ms it settled)
  // and ":m:" + group (set of its members).
  std::string groups;

  std::string schedule_partition_key(uint32_t partition) const { return schedule + ":" + std::to_string(partition); }
  std::string schedule_jobs_key(uint32_t partition) const { return schedule_partition_key(partition) + ":jobs"; }
};

// What lua/lib/keys.lua adds to a parked job's ready score (2^52 ms).
inline constexpr int64_t kKeyParkedOffset = int64_t{1} << 52;

// A chunk of the schedule filter (broker/store/schedule_partition.hpp):
// <filter prefix>:C.
inline std::string schedule_filter_chunk_key(const std::string& filter_prefix, uint32_t chunk) {
  return filter_prefix + ":" + std::to_string(chunk);
}

// The epoch key of the queue whose key is `queue_key` (any key built by
// QueueKeys), so that it lies in the same cluster slot; empty when the key
// has no hash tag.
inline std::string epoch_key_of(std::string_view queue_key) {
  const auto open = queue_key.find('{');
  const auto close = open == std::string_view::npos ? open : queue_key.find('}', open);
  if (close == std::string_view::npos) return {};
  return std::string(queue_key.substr(0, close + 1)) + ":epoch";
}

// The leader lease (lua/lead.lua): who leads, and the last epoch given.
inline const std::string kLeaderHolderKey = "dueq:{leader}:holder";
inline const std::string kLeaderEpochsKey = "dueq:{leader}:epochs";

// The set of queue names the broker has seen (for restarts and `dueq stats`),
// in the leader's slot: a registration is fenced by the leader's epoch
// counter there (lua/register_queue.lua), behind a Redis Cluster too.
inline const std::string kQueuesKey = "dueq:{leader}:queues";
// Where stores written before 0.5 keep it; moved at take-over
// (move_legacy_queue_set, broker/admin/store_upgrade.hpp).
inline const std::string kLegacyQueuesKey = "dueq:queues";

}  // namespace dueq::broker
