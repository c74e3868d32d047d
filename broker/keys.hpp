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
// partitions per queue chosen by a hash of the id: `schedule:<p>` (zset id ->
// due ms) and `schedule:<p>:jobs` (hash id -> record). Small enough to stay
// listpack-encoded in Redis, they cost about 230 bytes per delayed job where
// one big sorted set plus one big hash cost about 360 (a dict entry and a
// skiplist node per job). `schedule` (zset partition -> a lower bound of its
// earliest due ms) tells promote which partitions to look at. Lua scripts
// build a partition's keys from the `schedule` key by the same rule as
// schedule_partition_key / schedule_jobs_key below, and the schedule filter's
// (`schedule:filter`, which spares an enqueue most looks into a partition).
#include <xxhash.h>

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
        stats(key(queue, "stats")),
        jobs(key(queue, "jobs")),
        tokens(key(queue, "tokens")),
        attempts(key(queue, "attempts")),
        errors(key(queue, "errors")),
        error_logs(key(queue, "errlogs")),
        cancel_requested(key(queue, "cancelreq")),
        started(key(queue, "started")),
        unconfirmed(key(queue, "unconfirmed")) {}

  static std::string key(const std::string& queue, const char* what) { return "dueq:{" + queue + "}:" + what; }

  std::string schedule;          // zset partition -> lower bound of its earliest due ms (see above)
  std::string schedule_filter;   // prefix of the filter's chunks: strings of 8-bit counters, scheduled ids per (partition, id tail) (lua/lib/schedule_filter.lua)
  std::string legacy_scheduled;  // zset id -> due ms of stores written before the partitioned schedule
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
  std::string started;           // set of leased ids whose start the broker recorded (extend.lua "started" writes it)
  std::string unconfirmed;       // hash id -> deliveries that ended unstarted; its next worker announces the start (lua/lib/lost_delivery.lua)

  std::string schedule_partition_key(uint32_t partition) const { return schedule + ":" + std::to_string(partition); }
  std::string schedule_jobs_key(uint32_t partition) const { return schedule_partition_key(partition) + ":jobs"; }
};

// The schedule filter's chunks: chunk C holds the counters of partitions
// 1000*C .. 1000*C+999 under <filter prefix>:C (lua/lib/schedule_filter.lua).
inline constexpr uint32_t kScheduleFilterChunks = 33;
inline constexpr uint32_t kPartitionsPerFilterChunk = 1000;
inline std::string schedule_filter_chunk_key(const std::string& filter_prefix, uint32_t chunk) {
  return filter_prefix + ":" + std::to_string(chunk);
}

// Partitions of a queue's schedule. Fixed: changing it would strand every
// scheduled job in a partition its id no longer maps to (the Lua scripts
// check partition numbers against it too). 32,768 keeps a partition near 30
// jobs at a million scheduled, so the linear scans inside a listpack stay
// short (an enqueue's duplicate check looks in one), and under Redis's
// listpack limit (256 entries in deploy/redis.conf) up to about 6 million
// scheduled jobs per queue; past that partitions turn into ordinary
// hashtables and skiplists, which costs memory, not correctness.
inline constexpr uint32_t kSchedulePartitions = 32768;
static_assert(kScheduleFilterChunks * kPartitionsPerFilterChunk >= kSchedulePartitions &&
              (kScheduleFilterChunks - 1) * kPartitionsPerFilterChunk < kSchedulePartitions);

// The schedule partition of a job id (xxh3, stable across versions and hosts).
inline uint32_t schedule_partition(std::string_view id) {
  return static_cast<uint32_t>(XXH3_64bits(id.data(), id.size()) % kSchedulePartitions);
}

// The schedule filter's bucket of an id within its chunk as a BITFIELD bit
// offset: what lua/lib/schedule_filter.lua's filter_bit_offset computes, so
// that enqueue.lua reads a batch's counters with the broker's arguments
// instead of building them per job (it checks them against its own).
// The tail hashes the id's last three bytes as Lua's string.byte(id, -3, -1)
// returns them: an id shorter than three has its missing bytes at the end.
inline uint32_t schedule_filter_bit_offset(uint32_t partition, std::string_view id) {
  uint32_t bytes[3] = {0, 0, 0};
  const size_t from = id.size() > 3 ? id.size() - 3 : 0;
  for (size_t i = from; i < id.size(); ++i) bytes[i - from] = static_cast<unsigned char>(id[i]);
  const uint32_t tail = (bytes[0] * 961 + bytes[1] * 31 + bytes[2]) % 100;
  return ((partition % kPartitionsPerFilterChunk) * 100 + tail) * 8;
}

// Encoding pins. A queue's jobs, tokens and leased keys hold every job in
// flight: tens to hundreds of entries under load, where Redis keeps a hash
// or sorted set as a listpack and every HSET, HMGET, ZADD or ZREM scans all
// of it (an HSET of 26 records took 30 us, against 6 us in a hashtable).
// lua/pin_encoding.lua puts one long entry, the pin, into each: longer than
// the hash-max-listpack-value and zset-max-listpack-value of the Redis in
// use (the broker reads them at start, broker/redis_settings.hpp), it turns
// the key into a hashtable or skiplist for good, and keeps it from being
// deleted when its jobs are gone. Job ids hold no space and the pin does:
// scripts skip it through lua/lib/encoding_pin.lua, the auditor through
// is_encoding_pin, and in leased its deadline is +inf.
// The schedule partitions get no pin: they stay listpacks (see above).
// The shortest pin: longer than deploy/redis.conf's limits (1024).
inline constexpr size_t kEncodingPinBytes = 1025;
// The longest pin pin_encoding.lua takes: a Redis whose limits reach it
// keeps every key a listpack and is refused.
inline constexpr size_t kMaxEncodingPinBytes = 65536;
inline std::string encoding_pin(size_t bytes = kEncodingPinBytes) {
  std::string text = "dueq encoding pin: keeps this key out of listpack encoding (broker/keys.hpp) ";
  text.resize(bytes, '.');
  return text;
}
inline bool is_encoding_pin(std::string_view entry) { return entry.find(' ') != std::string_view::npos; }

// The set of queue names the broker has seen (for restarts and `dueq stats`).
inline const std::string kQueuesKey = "dueq:queues";

}  // namespace dueq::broker
