#pragma once
// The nemesis checker: reads a run's whole history and says which promise
// broke (docs/failure-modes.md, "The nemesis suite"). Pure: the unit tests
// feed it histories that break each rule.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/nemesis/history.hpp"

namespace dueq::nemesis {

struct Bounds {
  // After the last fault heals (or the last job falls due, if later), every
  // job reaches its end within this.
  int64_t settle_ms = 60'000;
  // A job started again is charged to a fault whose span, widened by this
  // after it heals (a lease, a worker timeout), overlaps the time between
  // its two starts; a start again with no such fault is a violation.
  int64_t blame_after_ms = 15'000;
  int64_t blame_before_ms = 1'000;
  // A job starts within `late_ms` of its due time (or of its acceptance, if
  // later) once time a fault excuses is taken out: a fault's span and
  // `recover_ms` after it heals (a take-over, a worker declared lost, a
  // fail-over), or for the kinds in `explains_no_delay` only `recover_ms`
  // from when it began (the system is to carry on through them).
  int64_t late_ms = 5'000;
  int64_t recover_ms = 15'000;
  std::vector<std::string> explains_no_delay;
  // Fault kinds that explain no start again. A clock step never does:
  // leases run on the steady clock. A named schedule adds the kinds whose
  // failure showed as jobs run twice (schedule.hpp).
  std::vector<std::string> explains_no_rerun = {"clock"};
  // The brokers' cron_lookahead: a periodic tick is enqueued within it
  // before it is due, so only a fault near that span explains a tick missed.
  int64_t cron_lookahead_ms = 3'000;
  int64_t broker_rss_kb = 1'048'576;   // peak resident set of any broker process
  int64_t redis_bytes = 268'435'456;   // peak used_memory of any Redis
  // Done jobs keep their documents (history_retention); not so for another
  // build's broker (--broker-bin), which may not know that key.
  bool documents_kept = true;
};

// The cause of a start again that no fault made: a producer asked for the
// job again after a delete of its (then empty) queue took its id along.
inline constexpr const char* kAskedAgainAfterDelete = "asked again after its queue was deleted";

struct Verdict {
  std::vector<std::string> violations;  // empty: the run kept every promise
  // Figures, printed whatever the verdict.
  size_t accepted = 0, unknown = 0, done = 0, cancelled = 0, starts = 0;
  std::map<std::string, size_t> accepted_by_queue;  // surely accepted, per queue
  size_t documents_kept = 0;  // done or cancelled jobs whose document the broker still kept
  size_t rescheduled = 0;     // jobs an operator moved to a new due time
  size_t edited = 0;          // jobs whose payload an operator's edit replaced (edits.tsv)
  size_t traced_starts = 0;   // starts of jobs sent with a trace context, recorded with the one handed (traces.tsv)
  size_t snoozes = 0;         // starts again of a snoozed job, its delay waited out
  size_t expired = 0;         // jobs with a start-by deadline that went dead "expired" (deadlines.tsv)
  size_t searches = 0;        // searches by type for a waiting job (searches.tsv)
  std::map<std::string, size_t> waits_by_state;  // waits.tsv, of surely accepted jobs, by how each was answered
  size_t progress_samples = 0;  // running jobs' progress as `dueq workers` showed it (progress.tsv)
  // The ordered queue (key_order.hpp): its jobs, their keys, and what a
  // fault explained: overlaps or turns out of order, and starts out of due order.
  size_t keyed_jobs = 0, keys = 0, key_turns_excused = 0, key_order_excused = 0;
  // Unique jobs (unique_holds.hpp): accepted, answered held by another, their
  // unique keys, and what a fault near (or a holder run again) explained.
  size_t unique_accepted = 0, unique_held = 0, unique_keys = 0, unique_excused = 0, unique_debounced = 0;
  // Flows and batches (flow_groups.hpp): groups, their jobs, parents run
  // and failed by a child, callbacks run, success callbacks cancelled, and
  // what a fault near explained.
  size_t flows = 0, batches = 0, group_jobs = 0, parents_ran = 0, parents_failed = 0, callbacks_ran = 0,
         successes_cancelled = 0, groups_excused = 0;
  // Ran, in a queue deleted since (only an empty queue can be: it was done).
  size_t gone_with_queue = 0;
  std::map<std::string, size_t> dead_by_reason;
  // Fault kind (or kAskedAgainAfterDelete) -> starts again.
  std::map<std::string, size_t> duplicates_by_cause;
  // Starts before the due time while a broker's clock ran ahead by at least
  // that much (docs/failure-modes.md: a clock stepped forward runs jobs early).
  size_t early_by_clock_step = 0;
  int64_t longest_rerun_gap_ms = 0;
  // The latest first start, past its due time, of time no fault excuses.
  int64_t longest_unexcused_late_ms = 0;
  size_t ticks_found = 0;
  std::map<std::string, size_t> ticks_missed_by_cause;  // fault kind -> ticks never enqueued
  int64_t settle_after_heal_ms = -1;
  int64_t broker_peak_rss_kb = 0, redis_peak_bytes = 0;  // the run's facts, as read
  std::string report() const;
};

Verdict check(const History& history, const Bounds& bounds);

// The bounds a run is checked against: the defaults, and for a named
// schedule (its name in the run's schedule.txt) the kinds it adds.
Bounds bounds_for(const std::string& schedule_name);

}  // namespace dueq::nemesis
