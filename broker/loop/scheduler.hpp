#pragma once
// Scheduler: moves time forward in Redis. Per queue it promotes jobs whose
// due time has come (promote.lua), returns jobs whose lease ran out
// (reclaim.lua: a delivery lost on the wire or a worker that never reported
// it) and removes done/cancelled ids past their retention (sweep.lua). Each
// reply says when the next one is due, so the loop sleeps until exactly then.
#include <span>
#include <unordered_map>
#include <string>

#include "broker/config/config.hpp"
#include "broker/loop/inflight.hpp"
#include "broker/loop/queues.hpp"
#include "broker/store/refusal_backoff.hpp"
#include "broker/loop/workers.hpp"
#include "broker/store/round.hpp"
#include "broker/store/redis_client.hpp"
#include "common/clock.hpp"

namespace dueq::broker {

struct PromoteOutcome {
  int64_t moved = 0;
  int64_t next_due_ms = -1;
};

struct ReclaimOutcome {
  int64_t requeued = 0;
  int64_t dead = 0;
  int64_t next_deadline_ms = -1;
  int64_t not_counted = 0;  // of the requeued: deliveries no worker confirmed, no attempt used
  int64_t released_due_ms = -1;  // a job held for its group that these outcomes released: its due ms
};

struct SweepOutcome {
  int64_t done = 0, cancelled = 0;  // ids removed
  int64_t forgotten_early = 0;      // of those, removed by done_max before their retention
  int64_t earliest_finish_ms = -1;  // of the ids left in either set; -1 when none is
  int64_t history_trimmed = 0;       // history entries removed
  int64_t earliest_history_ms = -1;  // finish of the earliest job whose history entry may be left; -1: none
  bool history_more = false;         // a history trim stopped at the limit (or the group sweep did)
  int64_t groups_removed = 0;        // flows and batches settled before the cutoff, forgotten
};

namespace calls {
Command promote(const std::string& queue, int64_t now_ms, int limit, bool fair = false);
Result<PromoteOutcome> parse_promote(const redisReply* reply);
// With `keep_history` a job that ends cancelled keeps its document in the
// queue's history hash (retention_s > 0).
Command reclaim(const std::string& queue, int64_t now_ms, int limit, int64_t retention_s, bool keep_history = false);
Result<ReclaimOutcome> parse_reclaim(const redisReply* reply);
// History entries of jobs finished before `history_cutoff_ms` (at least
// `cutoff_ms`), or past the `history_max` newest of their set (0: no count
// limit), are trimmed too.
Command sweep(const std::string& queue, int64_t cutoff_ms, int limit, int64_t max_kept, int64_t window_start_ms,
              int64_t history_cutoff_ms = 0, int64_t history_max = 0);
Result<SweepOutcome> parse_sweep(const redisReply* reply);
// align_leases.lua: [leases moved to the grace deadline]
Command align_leases(const std::string& queue, int64_t grace_ms, int limit);
}  // namespace calls

class Scheduler {
 public:
  Scheduler(const BrokerConfig& config, const Clock& clock, const LeaseClock& lease_clock, QueueTable& queues,
            InflightTable& inflight, Workers& workers, RefusalBackoff& refusals)
      : config_(config), clock_(clock), lease_clock_(lease_clock), queues_(queues), inflight_(inflight), workers_(workers),
        refusals_(refusals) {}

  // A new leader cannot know which worker holds what until they say HELLO:
  // every lease written by the broker before is moved to the end of a grace
  // period (worker_timeout + delivery_timeout from now). Longer ones come
  // down, so jobs nobody holds are re-delivered then and not a whole TTL
  // on; shorter or lapsed ones go up, so a worker still running the job, or
  // holding its result, reports it first (align_leases.lua).
  int64_t grace_deadline() const;
  // One round trip for all of `queues`, then one for those with more left.
  Result<void> align_previous_leases(RedisClient& redis, std::span<const std::string> queues, int64_t grace_ms);

  // Adds the promote, reclaim and sweep calls that are due (none while
  // Redis refuses writes), at most about kMaxCallsPerRound; the next round
  // goes on from the queue where this one stopped.
  void add_to(Round& round);
  static constexpr size_t kMaxCallsPerRound = 2'000;
  // Microseconds from now until the earliest due time or lease deadline
  // known, or until the end of a refusal back-off; -1 when none is known.
  int64_t us_until_next(int64_t wall_us_now) const;

 private:
  struct RoundTimes {
    int64_t wall_ms, lease_ms, steady_ms;
    bool inflight_expired = false;  // the broker's copies of expired leases dropped this round
  };
  // Each adds its call for one queue.
  void add_promote(Round& round, const std::string& name, QueueState& q, const RoundTimes& at);
  void add_reclaim(Round& round, const std::string& name, QueueState& q, RoundTimes& at);
  void add_sweep(Round& round, const std::string& name, QueueState& q, const RoundTimes& at);
  // Steady ms until the sweep after `swept`: see scheduler.cpp.
  int64_t ms_until_next_sweep(const std::string& name, const SweepOutcome& swept, int64_t wall_now_ms) const;

  const BrokerConfig& config_;
  const Clock& clock_;
  const LeaseClock& lease_clock_;
  QueueTable& queues_;
  InflightTable& inflight_;
  Workers& workers_;  // told of deliveries whose lease ran out
  RefusalBackoff& refusals_;
  void log_history_trim(const std::string& name, int64_t trimmed, int64_t steady_now);

  LogLimiter forgotten_log_{60'000, 5, 1'000};
  LogLimiter history_log_{60'000, 5, 1'000};
  std::unordered_map<std::string, int64_t> history_trims_unlogged_;  // per queue, since its last line
  std::string cursor_;  // the queue the next round starts from
};

}  // namespace dueq::broker
