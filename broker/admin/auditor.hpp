#pragma once
// Checks a queue's books: the conservation law (every accepted job is done,
// cancelled, purged, dead, scheduled, ready or leased, exactly once) and that
// every job record and every state-set entry agree. Reads in bounded slices;
// each slice is checked atomically in Redis by audit.lua, so jobs moving
// while the audit runs are not reported as problems. Run it on a connection
// of its own (admin, reconciler): it makes tens of thousands of calls.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "broker/store/round.hpp"
#include "broker/store/redis_client.hpp"

namespace dueq::broker {

struct AuditCounts {
  int64_t scheduled = 0, ready = 0, leased = 0, dead = 0, accepted = 0, done = 0, cancelled = 0, purged = 0;
  // accepted == done + cancelled + purged + dead + scheduled + ready + leased
  int64_t imbalance() const { return accepted - (done + cancelled + purged + dead + scheduled + ready + leased); }
};

struct AuditSlice {
  AuditCounts counts;  // only from a call without ids
  std::vector<std::pair<std::string, std::string>> problems;  // id, description
};

// A schedule filter counter that disagrees with its bucket's ids.
struct FilterBucket {
  int64_t partition = 0;
  int64_t tail = 0;
  int64_t counter = 0;
  int64_t ids = 0;
};

// One step of the audit's walk over a queue's schedule partitions.
// A partition the schedule index does not name by its earliest due time:
// promote would never look at it.
struct UnindexedPartition {
  uint32_t partition = 0;
  int64_t earliest_due_ms = 0;
};

// A partition holding jobs of an indexed type whose bitmap does not name
// it: a search by that type would skip them.
struct UntypedPartition {
  uint32_t partition = 0;
  std::string type;
};

struct ScheduleStep {
  std::vector<std::string> ids;                // held by the partitions, each once
  std::vector<FilterBucket> wrong;             // filter counters that disagree with them
  std::vector<UnindexedPartition> unindexed;  // partitions missing from the index
  std::vector<UntypedPartition> untyped;      // (partition, type) the type index misses
};

namespace calls {
Command audit(const std::string& queue, const std::vector<std::string>& ids);
Result<AuditSlice> parse_audit(const redisReply* reply);
// repair.lua: the dangling entries it removed.
Command repair(const std::string& queue, const std::vector<std::string>& ids);
// filter_check.lua: `set` makes the counters exact; `filter_key` is the
// queue's schedule filter or a key being built to replace it.
Command filter_check(const std::string& queue, const std::string& filter_key, bool set,
                     const std::vector<uint32_t>& partitions);
Result<std::vector<FilterBucket>> parse_filter_check(const redisReply* reply);
// audit_schedule.lua
Command audit_schedule(const std::string& queue, uint32_t first, uint32_t count);
Result<ScheduleStep> parse_audit_schedule(const redisReply* reply);
// scan_ids.lua: one HSCAN step, [next cursor, [ids]].
Command scan_ids(const std::string& hash_key, const std::string& cursor, int count);
}  // namespace calls

struct AuditReport {
  std::string queue;
  AuditCounts counts;
  std::vector<std::pair<std::string, std::string>> problems;  // id, description
  std::vector<std::string> repaired;                           // dangling entries removed, filter counters corrected
  bool clean() const { return counts.imbalance() == 0 && problems.empty(); }
};

// Calls `visit` with the ids of a state set (ready, leased or dead), a slice
// of about `count_hint` at a time, without the encoding pin. By ZSCAN, not by
// rank: a job that leaves the set between two slices shifts the ranks after
// it, and a rank walk would skip an id still there. A scan visits every
// member present from its start to its end (some twice).
Result<void> walk_state_set(RedisClient& redis, const std::string& key, int64_t count_hint,
                            const std::function<Result<void>(const std::vector<std::string>&)>& visit);

// With `repair`, entries whose job record is gone are removed (always safe:
// they can never be delivered), schedule filter counters are made exact,
// partitions missing from the schedule index are put back in it, and all
// are listed in `repaired` instead of `problems`.
Result<AuditReport> audit_queue(RedisClient& redis, const std::string& queue, bool repair);

// The schedule filter's wrong counters over every partition (with `set`:
// the ones corrected).
Result<std::vector<FilterBucket>> check_schedule_filter(RedisClient& redis, const std::string& queue,
                                                        const std::string& filter_key, bool set);

}  // namespace dueq::broker
