#include "tests/nemesis/checker.hpp"

#include "tests/nemesis/key_order.hpp"
#include "tests/nemesis/flow_groups.hpp"
#include "tests/nemesis/unique_holds.hpp"

#include <fmt/format.h>

#include "tests/nemesis/schedule.hpp"

#include <algorithm>
#include <set>
#include <unordered_map>

namespace dueq::nemesis {

namespace {

// Jobs whose handler fails (or kills its worker) on every attempt: they
// run once per attempt and end dead.
bool always_fails(const std::string& type) { return type == "fail" || type == "crash"; }

// A dead job's reason without its particulars (the attempt, the worker).
std::string reason_class(const std::string& error) {
  std::string first = error.substr(0, error.find('\n'));
  if (auto colon = first.find(':'); colon != std::string::npos) first.resize(colon);
  if (first.size() > 60) first.resize(60);
  return first;
}

class Checking {
 public:
  Checking(const History& h, const Bounds& b) : h_(h), b_(b) {
    for (const auto& s : h.starts) starts_[s.id].push_back(s);
    for (auto& [id, runs] : starts_)
      std::sort(runs.begin(), runs.end(), [](const Start& x, const Start& y) { return x.start_us < y.start_us; });
    cancels_.insert(h.cancels.begin(), h.cancels.end());
    step_back_ms_ = largest_step_back_ms();
    excused_ = excused_spans();
  }

  Verdict run() {
    v_.starts = h_.starts.size();
    int64_t last_due_ms = 0;
    for (const auto& job : h_.accepted) {
      last_due_ms = std::max(last_due_ms, job.due_ms);
      check_end(job);
      // A job an operator rescheduled may start from the earlier of its two
      // due times, and is late only past the later one (whether the move
      // landed before the job was due is not known).
      AcceptedJob earliest = job, latest = job;
      if (auto moved = h_.reschedules.find(job.id); moved != h_.reschedules.end()) {
        earliest.due_ms = std::min(job.due_ms, moved->second);
        latest.due_ms = std::max(job.due_ms, moved->second);
        ++v_.rescheduled;
      }
      check_starts(earliest);
      check_late(latest);
    }
    check_ticks();
    check_searches();
    check_waits();
    check_progress();
    check_edits();
    check_traces();
    check_deadlines();
    check_keys();
    check_unique();
    check_groups();
    // Every queue keeps the documents of its newest done jobs (history_max).
    if (b_.documents_kept && v_.done > 0 && v_.documents_kept == 0) wrong_run("no done job kept its document (history_retention, history_max)");
    check_settled(last_due_ms);
    check_counters();
    check_memory();
    return std::move(v_);
  }

 private:
  void wrong(const std::string& id, const std::string& what) { v_.violations.push_back(fmt::format("{}: {}", id, what)); }
  // The run's own violations are listed before the jobs'.
  void wrong_run(const std::string& what) {
    v_.violations.insert(v_.violations.begin() + static_cast<std::ptrdiff_t>(run_violations_++), "run: " + what);
  }

  const FinalState* final_of(const std::string& id) const {
    auto it = h_.finals.find(id);
    return it == h_.finals.end() || it->second.state.empty() ? nullptr : &it->second;
  }

  void check_end(const AcceptedJob& job) {
    ++(job.surely ? v_.accepted : v_.unknown);
    if (job.surely) ++v_.accepted_by_queue[job.queue];
    const FinalState* end = final_of(job.id);
    if (end == nullptr) {
      // A queue is deleted only when it holds nothing scheduled, ready,
      // running or dead, and its done ids go with it: a job that started
      // and is gone with its queue ended done. One that never started is
      // lost all the same.
      if (job.surely && h_.deleted_queues.contains(job.queue) && (!starts_[job.id].empty() || cancels_.contains(job.id))) {
        ++v_.gone_with_queue;
        return;
      }
      if (job.surely) wrong(job.id, "LOST: accepted, and the broker does not know it");
      return;
    }
    if (job.surely) found_++;
    else found_unknown_++;
    check_kept_document(job, *end);
    const auto& runs = starts_[job.id];
    if (end->state == "done") {
      ++v_.done;
      if (always_fails(job.type)) wrong(job.id, "a job whose handler always fails ended done");
      const bool started_before = std::any_of(runs.begin(), runs.end(),
                                              [&](const Start& s) { return s.start_us / 1000 <= end->finished_ms + step_back_ms_; });
      if (!started_before) wrong(job.id, "done, but no delivery of it started before it was finished");
    } else if (end->state == "dead") {
      ++v_.dead_by_reason[reason_class(end->error)];
      if (h_.deadlines.contains(job.id) && end->error.starts_with("expired")) check_expired(job);
      else if (!always_fails(job.type)) wrong(job.id, "a job that succeeds ended dead: '" + end->error + "'");
      else if (end->error.empty()) wrong(job.id, "dead without a reason");
    } else if (end->state == "cancelled") {
      ++v_.cancelled;
      if (!cancels_.contains(job.id)) wrong(job.id, "cancelled, but nobody asked");
    } else {
      wrong(job.id, "UNFINISHED: still '" + end->state + "' after the run settled");
    }
  }

  // A finished job's kept document (its queue's history) is that job's: its
  // type, and for a done job the attempt one of its starts had.
  void check_kept_document(const AcceptedJob& job, const FinalState& end) {
    if (end.type.empty() || (end.state != "done" && end.state != "cancelled")) return;
    ++v_.documents_kept;
    if (end.type != job.type) wrong(job.id, fmt::format("its kept document names type '{}', not '{}'", end.type, job.type));
    if (end.state != "done") return;
    const auto& runs = starts_[job.id];
    if (std::none_of(runs.begin(), runs.end(), [&](const Start& s) { return static_cast<int64_t>(s.attempt) == end.attempt; }))
      wrong(job.id, fmt::format("its kept document says attempt {}, which no start of it had", end.attempt));
  }

  // The ordered queue's jobs (key_order.hpp).
  void check_keys() {
    auto found = check_key_order(h_, [this](int64_t before_us, int64_t after_us) { return blame(before_us, after_us); });
    v_.keyed_jobs = found.keyed_jobs;
    v_.keys = found.keys;
    v_.key_turns_excused = found.excused_turns;
    v_.key_order_excused = found.excused_order;
    for (auto& what : found.violations) v_.violations.push_back(std::move(what));
  }

  // Unique jobs (unique_holds.hpp).
  void check_unique() {
    auto found = check_unique_holds(h_, [this](int64_t from_ms, int64_t to_ms) { return fault_near(from_ms, to_ms); });
    v_.unique_accepted = found.accepted;
    v_.unique_held = found.held;
    v_.unique_debounced = found.debounced;
    v_.unique_keys = found.keys;
    v_.unique_excused = found.excused;
    for (auto& what : found.violations) v_.violations.push_back(std::move(what));
  }

  // Flows and batches (flow_groups.hpp).
  void check_groups() {
    auto found = dueq::nemesis::check_groups(h_, [this](int64_t from_ms, int64_t to_ms) { return fault_near(from_ms, to_ms); });
    v_.flows = found.flows;
    v_.batches = found.batches;
    v_.group_jobs = found.jobs;
    v_.parents_ran = found.parents_ran;
    v_.parents_failed = found.parents_failed;
    v_.callbacks_ran = found.callbacks_ran;
    v_.successes_cancelled = found.successes_cancelled;
    v_.groups_excused = found.excused;
    for (auto& what : found.violations) v_.violations.push_back(std::move(what));
  }

  // A fault of any kind between `from_ms` and `to_ms`, or so close before
  // or after that its effects may reach them.
  const FaultSpan* fault_near(int64_t from_ms, int64_t to_ms) const {
    for (const auto& f : h_.faults)
      if (f.from_ms - b_.blame_before_ms <= to_ms && f.to_ms + b_.blame_after_ms >= from_ms) return &f;
    return nullptr;
  }

  // The fault that explains a start again between `before_us` and `after_us`
  // (none of the kinds Bounds::explains_no_rerun names).
  const FaultSpan* blame(int64_t before_us, int64_t after_us) const {
    const auto& barred = b_.explains_no_rerun;
    for (const auto& f : h_.faults)
      if (std::find(barred.begin(), barred.end(), f.kind) == barred.end() && f.from_ms - b_.blame_before_ms <= after_us / 1000 &&
          f.to_ms + b_.blame_after_ms >= before_us / 1000)
        return &f;
    return nullptr;
  }

  // Whether a delete of the job's queue may have landed after its start at
  // `before_ms` and a producer asked for the job again after the delete
  // began and before its start at `after_ms`. A delete succeeds only on a
  // queue holding nothing, so the first run had ended, and its id went with
  // the queue: that ask made a new job of the same id.
  bool asked_again_after_delete(const AcceptedJob& job, int64_t before_ms, int64_t after_ms) const {
    auto asks = h_.asks.find(job.id);
    if (asks == h_.asks.end()) return false;
    return std::any_of(h_.deletes.begin(), h_.deletes.end(), [&](const QueueDelete& d) {
      return d.queue == job.queue && d.to_ms >= before_ms &&
             std::any_of(asks->second.begin(), asks->second.end(), [&](int64_t at) { return at >= d.from_ms && at <= after_ms; });
    });
  }

  // A job that expired needs a fault: without one a job starts within
  // milliseconds of its due time, and its deadline is 4 s after that. Any
  // excused time (a fault's span, recover_ms after it) between its due
  // time (or acceptance) and its deadline explains it.
  void check_expired(const AcceptedJob& job) {
    ++v_.expired;
    const int64_t ready_ms = std::max(job.due_ms, job.answered_ms), start_by = h_.deadlines.at(job.id);
    if (start_by > ready_ms && unexcused_ms(ready_ms, start_by) >= start_by - ready_ms)
      wrong(job.id, fmt::format("EXPIRED with no fault to explain it: due (or accepted) at {} ms, its deadline {} ms later",
                                ready_ms, start_by - ready_ms));
  }

  // Every start a worker recorded with its trace context (the example
  // worker's) was handed the one its job was sent with, whatever faults
  // came between; a job sent without one was handed none.
  void check_traces() {
    for (const auto& s : h_.starts) {
      if (s.traceparent.empty()) continue;
      const auto sent = h_.traces.find(s.id);
      const std::string want = sent == h_.traces.end() ? "-" : sent->second;
      if (sent != h_.traces.end()) ++v_.traced_starts;
      if (s.traceparent != want)
        wrong(s.id, fmt::format("TRACE CONTEXT LOST: a start (token {}) was handed '{}', the job was sent with '{}'", s.token,
                                s.traceparent, want));
    }
  }

  // A job never starts past its start-by deadline (the workers' clock is
  // the host's: the clock faults step brokers' clocks only).
  void check_deadlines() {
    for (const auto& [id, start_by] : h_.deadlines)
      for (const auto& run : starts_[id])
        if (run.start_us / 1000 > start_by)
          wrong(id, fmt::format("PAST ITS DEADLINE: started {} ms after its start-by time", run.start_us / 1000 - start_by));
  }

  // An edit answered done landed while the job waited: its last start (a
  // start before the edit, of a delivery that went back, may carry the old
  // one) runs with the edited payload.
  void check_edits() {
    for (const auto& [id, payload] : h_.edits) {
      ++v_.edited;
      const auto& runs = starts_[id];
      if (!runs.empty() && !runs.back().payload.empty() && runs.back().payload != payload)
        wrong(id, fmt::format("EDIT LOST: its edit to payload '{}' was answered done, and its last start ran with '{}'",
                              payload, runs.back().payload));
    }
  }

  // A search by type of the scheduled state finds a job due 3 s or more
  // after it was asked that no operator touched, unless its answer came
  // after the due time (a search held up by a fault, or retried at the
  // other broker, may have run once the job was promoted) or a broker whose
  // clock ran ahead by the time left may have promoted it. A fault on the
  // store excuses no miss by itself: the admin thread reads only from a
  // master (ROLE with every call) and follows the loop's connection to a
  // new one (docs/failure-modes.md).
  void check_searches() {
    std::map<std::string, int64_t> due;
    for (const auto& job : h_.accepted) due[job.id] = job.due_ms;
    for (const auto& s : h_.searches) {
      ++v_.searches;
      const auto it = due.find(s.id);
      if (it == due.end()) {
        wrong(s.id, "searched for, but never accepted");
      } else if (!s.found && s.answered_ms < it->second && !clock_ahead(s.at_ms, it->second - s.answered_ms)) {
        wrong(s.id, fmt::format("MISSED BY SEARCH: scheduled, due {} ms after a search by its type at wall ms {} "
                                "that did not find it (answered after {} ms: \"{}\"; a lookup right after: {})",
                                it->second - s.at_ms, s.at_ms, s.answered_ms - s.at_ms, s.summary,
                                s.state_after.empty() ? "none" : s.state_after));
      }
    }
  }

  // A producer's wait for an echo job (waits.tsv) tells its end as the run
  // settled on it: done with the job's id as its result, after a start of
  // it; dead or cancelled as the job ended; never unknown while the job is
  // known at the end. A wait that timed out (pending) is counted.
  void check_waits() {
    std::map<std::string, const AcceptedJob*> accepted;
    for (const auto& job : h_.accepted)
      if (job.surely) accepted[job.id] = &job;
    std::map<std::string, int64_t> first_start_ms;
    for (const auto& s : h_.starts) {
      auto [it, added] = first_start_ms.emplace(s.id, s.start_us / 1000);
      if (!added) it->second = std::min(it->second, s.start_us / 1000);
    }
    for (const auto& w : h_.waits) {
      const auto job = accepted.find(w.id);
      if (job == accepted.end()) continue;  // not surely accepted: any answer may be right
      ++v_.waits_by_state[w.state];
      const auto final_it = h_.finals.find(w.id);
      const std::string final_state = final_it == h_.finals.end() ? "" : final_it->second.state;
      if (w.state == "done") {
        if (w.result != w.id) wrong(w.id, fmt::format("WAIT: done with the result \"{}\", not its payload", w.result));
        const auto started = first_start_ms.find(w.id);
        if (started == first_start_ms.end() || started->second > w.answered_ms)
          wrong(w.id, "WAIT: answered done before any start of the job");
        if (!final_state.empty() && final_state != "done") wrong(w.id, "WAIT: answered done, but the job ended " + final_state);
      } else if (w.state == "dead" || w.state == "cancelled") {
        if (final_state != w.state) wrong(w.id, fmt::format("WAIT: answered {}, but the job is {}", w.state, final_state.empty() ? "gone" : final_state));
      } else if (w.state == "unknown") {
        if (!final_state.empty() && !h_.deleted_queues.contains(job->second->queue))
          wrong(w.id, "WAIT: answered unknown for a job the broker shows " + final_state);
      } else if (w.state != "pending") {
        wrong(w.id, "WAIT: an answer of no known state: " + w.state);
      }
    }
  }

  // A running job's progress (progress.tsv) is its own handler's: the text
  // the sleep handler reports names its job's id, with a percent 0..100,
  // and the job was started.
  void check_progress() {
    std::set<std::string> started;
    for (const auto& s : h_.starts) started.insert(s.id);
    for (const auto& p : h_.progress) {
      ++v_.progress_samples;
      if (p.named != p.id) wrong(p.id, "PROGRESS: shown with the progress of job " + p.named);
      if (p.percent < 0 || p.percent > 100) wrong(p.id, fmt::format("PROGRESS: shown at {}%", p.percent));
      if (!started.contains(p.id)) wrong(p.id, "PROGRESS: shown for a job no worker recorded starting");
    }
  }

  // Whether a broker's clock ran at least `early_ms` ahead around `start_ms`.
  bool clock_ahead(int64_t start_ms, int64_t early_ms) const {
    return std::any_of(h_.faults.begin(), h_.faults.end(), [&](const FaultSpan& f) {
      return f.kind == "clock" && f.shift_ms >= early_ms && f.from_ms <= start_ms && start_ms <= f.to_ms + b_.blame_after_ms;
    });
  }

  // A debounced job's latest due time is its first enqueue plus its period
  // by the clock of the broker that took it (docs/keys.md): a broker whose
  // clock was stepped back at least `early_ms` while it took the job set
  // that bound earlier than the producer's clock says.
  bool debounce_bound_by_clock_behind(const std::string& id, int64_t early_ms) const {
    const auto ask = std::find_if(h_.uniques.begin(), h_.uniques.end(), [&](const UniqueAsk& u) {
      return u.id == id && u.mode == "debounce" && u.outcome == "accepted";
    });
    if (ask == h_.uniques.end()) return false;
    return std::any_of(h_.faults.begin(), h_.faults.end(), [&](const FaultSpan& f) {
      return f.kind == "clock" && -f.shift_ms >= early_ms && f.from_ms <= ask->answered_ms && ask->sent_ms <= f.to_ms;
    });
  }

  // How far any broker's clock was stepped back: its results may carry a
  // finish time that much before the worker's start.
  int64_t largest_step_back_ms() const {
    int64_t most = 0;
    for (const auto& f : h_.faults)
      if (f.kind == "clock") most = std::max(most, -f.shift_ms);
    return most;
  }

  void check_starts(const AcceptedJob& job) {
    const auto& runs = starts_[job.id];
    std::set<uint64_t> tokens;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (const int64_t early_us = job.due_ms * 1000 - runs[i].start_us; early_us > 0) {
        const int64_t early_ms = (early_us + 999) / 1000;
        if (clock_ahead(runs[i].start_us / 1000, early_ms) || debounce_bound_by_clock_behind(job.id, early_ms))
          ++v_.early_by_clock_step;
        else wrong(job.id, fmt::format("EARLY: started {} us before its due time", early_us));
      }
      if (!tokens.insert(runs[i].token).second) wrong(job.id, fmt::format("one delivery (token {}) started twice", runs[i].token));
      if (i == 0) continue;
      // A retry of a job that fails is its next attempt, not a duplicate.
      if (always_fails(job.type) && runs[i].attempt > runs[i - 1].attempt) continue;
      // A snoozed job runs again as the same attempt, no sooner than it asked.
      if (job.type == "snooze_once" && runs[i].attempt == runs[i - 1].attempt &&
          runs[i].start_us - runs[i - 1].start_us >= kSnoozeMs * 1000) {
        ++v_.snoozes;
        continue;
      }
      v_.longest_rerun_gap_ms = std::max(v_.longest_rerun_gap_ms, (runs[i].start_us - runs[i - 1].start_us) / 1000);
      if (asked_again_after_delete(job, runs[i - 1].start_us / 1000, runs[i].start_us / 1000)) {
        ++v_.duplicates_by_cause[kAskedAgainAfterDelete];
      } else if (const FaultSpan* f = blame(runs[i - 1].start_us, runs[i].start_us)) {
        ++v_.duplicates_by_cause[f->kind];
      } else {
        ++v_.duplicates_by_cause["(none: a violation)"];
        wrong(job.id, fmt::format("started again at {} us (attempt {}) with no fault to explain it", runs[i].start_us,
                                  runs[i].attempt));
      }
    }
  }

  // The spans that excuse a job not started yet: each fault's span and
  // recover_ms after it, or only recover_ms from its start for the kinds
  // the schedule says the system carries on through.
  std::vector<std::pair<int64_t, int64_t>> excused_spans() const {
    std::vector<std::pair<int64_t, int64_t>> spans;
    const auto& carried_on = b_.explains_no_delay;
    for (const auto& f : h_.faults) {
      const bool through = std::find(carried_on.begin(), carried_on.end(), f.kind) != carried_on.end();
      spans.emplace_back(f.from_ms, (through ? f.from_ms : f.to_ms) + b_.recover_ms);
    }
    std::sort(spans.begin(), spans.end());
    return spans;
  }

  // Of [from_ms, to_ms], the time no excused span covers.
  int64_t unexcused_ms(int64_t from_ms, int64_t to_ms) const {
    int64_t unexcused = 0, at = from_ms;
    for (const auto& [begin, end] : excused_) {
      if (begin >= to_ms) break;
      if (begin > at) unexcused += begin - at;
      at = std::max(at, end);
      if (at >= to_ms) return unexcused;
    }
    return unexcused + std::max<int64_t>(0, to_ms - at);
  }

  // A job's first start, past its due time (or its acceptance, if later),
  // by more than late_ms of time no fault excuses: the system stopped
  // serving while it should have carried on.
  void check_late(const AcceptedJob& job) {
    const auto& runs = starts_[job.id];
    if (!job.surely || runs.empty()) return;
    const int64_t ready_ms = std::max(job.due_ms, job.answered_ms), started_ms = runs.front().start_us / 1000;
    if (started_ms <= ready_ms) return;
    const int64_t late = unexcused_ms(ready_ms, started_ms);
    v_.longest_unexcused_late_ms = std::max(v_.longest_unexcused_late_ms, late);
    if (late > b_.late_ms)
      wrong(job.id, fmt::format("LATE: first started {} ms after it was due, {} ms of it with no fault to excuse it "
                                "(bound {} ms)",
                                started_ms - ready_ms, late, b_.late_ms));
  }

  // A periodic tick never enqueued (a leader that took over after it fell
  // due skips it: misfire = "skip") needs a fault, of any kind but a
  // worker's poison job, near the lookahead before it.
  void check_ticks() {
    for (const auto& tick : h_.ticks) {
      if (tick.found) {
        ++v_.ticks_found;
        continue;
      }
      const auto f = std::find_if(h_.faults.begin(), h_.faults.end(), [&](const FaultSpan& f) {
        return f.kind != "poison" && f.from_ms - b_.blame_before_ms <= tick.due_ms &&
               f.to_ms + b_.blame_after_ms >= tick.due_ms - b_.cron_lookahead_ms;
      });
      if (f != h_.faults.end()) {
        ++v_.ticks_missed_by_cause[f->kind];
      } else {
        ++v_.ticks_missed_by_cause["(none: a violation)"];
        wrong(tick.id, "MISSED: a periodic tick never enqueued, with no fault to explain it");
      }
    }
  }

  void check_settled(int64_t last_due_ms) {
    const int64_t healed = h_.fact("healed_ms"), settled = h_.fact("settled_ms");
    if (healed < 0 || settled < 0) {
      wrong_run("never settled: some job did not reach its end");
      return;
    }
    v_.settle_after_heal_ms = settled - healed;
    const int64_t from = std::max(healed, last_due_ms);
    if (settled - from > b_.settle_ms)
      wrong_run(fmt::format("STALL: jobs reached their end {} ms after the last fault healed or job fell due (bound {} ms)",
                               settled - from, b_.settle_ms));
    if (h_.fact("audit", 1) != 0) wrong_run("`dueq audit` found violations (see audit.txt)");
  }

  // The queue's counters in `dueq stats` against the history.
  void check_counters() {
    const auto agree = [&](const char* counter, size_t counted) {
      const int64_t said = h_.fact(counter);
      if (said != static_cast<int64_t>(counted))
        wrong_run(fmt::format("{} says {}, the history {}", counter, said, counted));
    };
    size_t dead = 0;
    for (const auto& [reason, n] : v_.dead_by_reason) dead += n;
    agree("stats_done", v_.done);
    agree("stats_dead", dead);
    agree("stats_cancelled", v_.cancelled);
    agree("stats_accepted", found_ + found_unknown_);
    agree("stats_in_flight", 0);
  }

  void check_memory() {
    v_.broker_peak_rss_kb = h_.fact("broker_peak_rss_kb", 0);
    v_.redis_peak_bytes = h_.fact("redis_peak_bytes", 0);
    if (h_.fact("broker_peak_rss_kb", 0) > b_.broker_rss_kb)
      wrong_run(fmt::format("a broker's peak RSS {} kB is over {} kB", h_.fact("broker_peak_rss_kb"), b_.broker_rss_kb));
    if (h_.fact("redis_peak_bytes", 0) > b_.redis_bytes)
      wrong_run(fmt::format("Redis's peak memory {} B is over {} B", h_.fact("redis_peak_bytes"), b_.redis_bytes));
  }

  const History& h_;
  const Bounds& b_;
  Verdict v_;
  std::unordered_map<std::string, std::vector<Start>> starts_;
  std::set<std::string> cancels_;
  size_t found_ = 0, found_unknown_ = 0;
  size_t run_violations_ = 0;
  int64_t step_back_ms_ = 0;
  std::vector<std::pair<int64_t, int64_t>> excused_;  // by start
};

}  // namespace

Verdict check(const History& history, const Bounds& bounds) { return Checking(history, bounds).run(); }

Bounds bounds_for(const std::string& schedule_name) {
  Bounds bounds;
  if (const NamedSchedule* named = find_named_schedule(schedule_name)) {
    bounds.explains_no_rerun.insert(bounds.explains_no_rerun.end(), named->explains_no_rerun.begin(),
                                    named->explains_no_rerun.end());
    bounds.explains_no_delay = named->explains_no_delay;
    if (named->recover_ms > 0) bounds.recover_ms = named->recover_ms;
  }
  return bounds;
}

std::string Verdict::report() const {
  std::string out = fmt::format("accepted {} (and {} of unknown outcome), starts {}, done {}{}, cancelled {}, dead", accepted,
                                unknown, starts, done,
                                gone_with_queue == 0 ? "" : fmt::format(" (and {} ran and went with their deleted queue)", gone_with_queue),
                                cancelled);
  if (dead_by_reason.empty()) out += " 0";
  for (const auto& [reason, n] : dead_by_reason) out += fmt::format(" [{}: {}]", reason, n);
  out += fmt::format("; finished jobs whose document is kept {}; rescheduled {}; edited {}; traced starts {}; snoozed {}; "
                     "expired {}; searched for by type {}; waits",
                     documents_kept, rescheduled, edited, traced_starts, snoozes, expired, searches);
  if (waits_by_state.empty()) out += " 0";
  for (const auto& [state, n] : waits_by_state) out += fmt::format(" {} {}", state, n);
  out += fmt::format("; progress samples {}", progress_samples);
  out += "\naccepted by queue:";
  for (const auto& [queue, n] : accepted_by_queue) out += fmt::format(" {} {};", queue.empty() ? "(the one queue)" : queue, n);
  out += "\nstarted again, by cause:";
  if (duplicates_by_cause.empty()) out += " none";
  for (const auto& [cause, n] : duplicates_by_cause) out += fmt::format(" {} {};", cause, n);
  out += fmt::format("\nordered queue: {} jobs of {} keys; a fault explains {} overlaps or runs again after a later "
                     "job's turn, and {} starts before an earlier-due job of the key", keyed_jobs, keys, key_turns_excused,
                     key_order_excused);
  out += fmt::format("\nunique jobs: {} accepted with {} unique keys, {} answered held by another ({} of them debounced "
                     "into it); a fault or a holder run again explains {}", unique_accepted, unique_keys, unique_held,
                     unique_debounced, unique_excused);
  out += fmt::format("\nflows and batches: {} flows and {} batches stored whole, {} jobs; {} parents ran after their "
                     "children, {} failed by a child; {} callbacks ran, {} success callbacks cancelled; a fault near "
                     "explains {}",
                     flows, batches, group_jobs, parents_ran, parents_failed, callbacks_ran, successes_cancelled,
                     groups_excused);
  out += fmt::format("\nperiodic ticks enqueued {}, missed by cause:", ticks_found);
  if (ticks_missed_by_cause.empty()) out += " none";
  for (const auto& [cause, n] : ticks_missed_by_cause) out += fmt::format(" {} {};", cause, n);
  out += fmt::format("\nlongest first start past its due time with no fault to excuse it {} ms", longest_unexcused_late_ms);
  out += fmt::format("\nlongest gap between two starts of a job {} ms; settled {} ms after the last fault healed; "
                     "started early while a broker's clock ran ahead (or, debounced, whose bound a clock behind set) {}\npeak memory: broker {} MiB, Redis {} MiB\n",
                     longest_rerun_gap_ms, settle_after_heal_ms, early_by_clock_step, broker_peak_rss_kb / 1024,
                     redis_peak_bytes / (int64_t{1024} * 1024));
  // The first 60 are listed, the rest counted.
  for (size_t i = 0; i < violations.size() && i < 60; ++i) out += "VIOLATION " + violations[i] + "\n";
  if (violations.size() > 60) out += fmt::format("... and {} more violations\n", violations.size() - 60);
  out += violations.empty() ? "checker: PASS\n" : fmt::format("checker: FAIL ({} violations)\n", violations.size());
  return out;
}

}  // namespace dueq::nemesis
