#pragma once
// Periodic jobs: entries from the config file ([cron.NAME]) and from `dueq
// cron add` (kept in Redis, kCronEntriesKey), each a cron schedule
// (common/cron.hpp) that enqueues one job per tick.
//
// CronScheduler, on the event loop, enqueues every tick due within the
// next cron_lookahead (1 minute) ahead of time with cron_tick.lua (at least the next
// one): a tick is then in Redis as a delayed job before it is due, so it
// runs at its due time like any other, across broker restarts and
// take-overs shorter than the lookahead. The entry's state in Redis (the
// last tick enqueued, per queue) makes each tick enqueued exactly once,
// whichever broker sends it and however often. Ticks missed while no
// broker led (past the lookahead) follow the entry's misfire policy: skip
// them, or run the latest of them once.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/config/cron_entry.hpp"
#include "broker/loop/enqueuer.hpp"
#include "broker/loop/queues.hpp"
#include "broker/store/round.hpp"
#include "broker/store/redis_client.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"

namespace dueq::broker {

namespace calls {
// cron_tick.lua for `ticks` (ascending, at most 100).
Command cron_tick(const CronEntry& entry, const std::vector<int64_t>& ticks, int64_t now_ms, uint32_t default_max_attempts);
struct CronTickOutcome {
  int64_t enqueued = 0;  // -1: the state holds another definition's fingerprint
  int64_t last_ms = 0;
};
Result<CronTickOutcome> parse_cron_tick(const redisReply* reply);
}  // namespace calls

// The entries `dueq cron add` stored, with a problem per unreadable one.
Result<std::vector<CronEntry>> load_stored_cron_entries(RedisClient& redis, std::vector<std::string>& problems);
// The last tick enqueued of `entry` for its current definition (0: none yet),
// or nullopt when the state belongs to another definition.
Result<std::optional<int64_t>> read_cron_state(RedisClient& redis, const CronEntry& entry);

class CronScheduler {
 public:
  static constexpr int64_t kMisfireGraceMs = 1'000;  // a tick this late is still enqueued as usual
  static constexpr size_t kMaxTicksPerCall = 100;
  // How soon an entry whose queue's registration is in flight is looked at again.
  static constexpr int64_t kRegistrationWaitMs = 10;

  // `store_clock` is the lease clock (Redis TIME at take-over): a tick is
  // missed only when it is past on both clocks, so a leader whose wall
  // clock runs ahead of the store's skips none (it enqueues them, due by
  // its wall clock, as every due time is).
  CronScheduler(const BrokerConfig& config, const Clock& clock, const LeaseClock& store_clock, QueueTable& queues,
                Enqueuer& enqueuer)
      : config_(config), clock_(clock), store_clock_(store_clock), queues_(queues), enqueuer_(enqueuer) {}

  // At take-over: the config's entries and the stored ones, each with the
  // last tick enqueued for it (an entry whose config changed starts afresh).
  Result<void> load(RedisClient& redis);
  // `dueq cron add` / `remove` took effect in Redis (the admin thread).
  void put(CronEntry entry, int64_t last_ms);
  void remove(const std::string& name);
  // The name of an entry that enqueues into `queue`, or "" when none does.
  std::string entry_for(const std::string& queue) const {
    for (const auto& [name, t] : entries_)
      if (t.entry.queue == queue) return name;
    return {};
  }

  // Adds a cron_tick.lua call for each entry with ticks to enqueue now.
  void add_to(Round& round);
  // Microseconds until an entry has ticks to enqueue; -1 without entries.
  int64_t us_until_next(int64_t wall_ms_now) const;

  // For the dashboard and metrics: each entry's next tick not yet run.
  struct Upcoming {
    std::string name, queue, expression, time_zone;
    int64_t next_tick_ms = 0;
  };
  std::vector<Upcoming> upcoming(int64_t wall_ms_now) const;

 private:
  struct Tracked {
    CronEntry entry;
    int64_t last_ms = 0;        // the last tick enqueued (0: none)
    int64_t next_check_ms = 0;  // wall clock: when its next tick enters the lookahead
    bool in_flight = false;     // a cron_tick call is out
  };
  // The ticks of `t` to enqueue at `now_ms` (applying the misfire policy),
  // and when to look again.
  std::vector<int64_t> due_ticks(Tracked& t, int64_t now_ms);

  const BrokerConfig& config_;
  const Clock& clock_;
  const LeaseClock& store_clock_;
  QueueTable& queues_;
  Enqueuer& enqueuer_;  // registers a queue a tick creates
  std::map<std::string, Tracked> entries_;
};

}  // namespace dueq::broker
