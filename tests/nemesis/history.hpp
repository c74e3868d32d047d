#pragma once
// What a nemesis run saw, as files in its directory, so that the checker is
// a program of its own that can be run again on a kept run:
//
//   accepted.tsv  id, type, due ms, max attempts, "accepted" or "unknown"
//                 (the producer gave up asking: it may exist), and when the
//                 answer came (wall ms), and its queue ("" in runs
//                 before there were several: the run's one queue)
//   cancels.tsv   ids an operator asked to cancel
//   reschedules.tsv  id, new due ms: jobs an operator asked to move to a new
//                 due time (`dueq bulk run reschedule`, or `dueq job
//                 reschedule` by id), before asking
//   deadlines.tsv id, start-by ms: jobs sent with a start-by deadline
//   traces.tsv    id, traceparent: jobs sent with a trace context
//   edits.tsv     id, payload: jobs whose payload an operator's `dueq job
//                 edit` replaced (written once the edit was answered done)
//   deletes.tsv   queue, from ms, to ms: each `dueq queue delete` that
//                 removed its queue (the done jobs' ids went with it), and
//                 when the command began and ended (wall ms; "" in runs
//                 before they were recorded)
//   asks.tsv      id, wall ms: each time a producer asked for a job again
//                 after its first try had no answer that it was accepted
//   keys.tsv      id, key: each job sent to the ordered queue (`ordered =
//                 true`, docs/keys.md) with its key, before it was asked;
//                 such a job sleeps kOrderedRunMs in its handler
//   searches.tsv  id, wall ms, "found" or "missing": an operator's search
//                 (a miss adds the wall ms of its answer, its summary and
//                 the job's state in a lookup right after)
//   unique.tsv    id, unique key, accepted|held|unknown, wall ms sent and
//                 answered, the holder the broker named (held), done or
//                 debounce, the payload (a run before these had 6 fields)
//                 by type of the scheduled state for a job due 3 s or more
//                 later that no operator touched, and what its answer held
//   waits.tsv     id, wall ms asked, wall ms answered, state, result (hex),
//                 error (hex): a producer's wait (Client::wait, 30 s) for
//                 an echo job (its handler returns its payload, the id)
//   progress.tsv  id, the id its progress text names, percent: a running
//                 job's progress as `dueq workers` showed it
//   groups.tsv    id, group, parent ("" for none), policy (f, i, c; "-" for a
//                 root or callback), type, role (j a job, s a batch's success
//                 callback, c its complete callback), accepted|unknown: each
//                 job of a flow or batch of the flows queue (docs/flows.md),
//                 with how its request was answered (a batch's members of
//                 its closing request: the close's answer too)
//   faults.tsv    from ms, to ms, kind, target, clock shift ms: each
//                 fault's span on the wall clock (a worker that crashed on
//                 a poison job too)
//   starts-*.txt  each worker's starts: id attempt token start_us ...
//                 (the example worker writes eight fields, the fifth the
//                 due ms it was sent; the Python one six)
//   final.tsv     id, state, finished ms (0: not finished), error (hex),
//                 type (hex; "" when a finished job's document is no longer
//                 kept), attempt (0: not known): each job as the broker
//                 showed it after the run settled (state "" when it was not
//                 found)
//   ticks.tsv     id, due ms, "found" or "missing": each tick the run's
//                 periodic entry could have enqueued (those found are in
//                 accepted.tsv too)
//   facts.tsv     name, value: the seed, when the last fault healed, when
//                 the run settled, the audit's exit code, the stats
//                 counters, peak memory of brokers and Redis
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

namespace dueq::nemesis {

struct AcceptedJob {
  std::string id;
  std::string type;
  int64_t due_ms = 0;
  int max_attempts = 0;
  bool surely = true;  // false: the producer never heard an answer
  int64_t answered_ms = 0;
  std::string queue;
};

struct FaultSpan {
  int64_t from_ms = 0, to_ms = 0;
  std::string kind;    // partition, pause, kill, failover, demote, poison
  std::string target;  // which nodes, as the schedule names them
  int64_t shift_ms = 0;  // a clock fault's step
};

struct Start {
  std::string id;
  int attempt = 0;
  uint64_t token = 0;
  int64_t start_us = 0;
  std::string worker;  // the file it came from
  int64_t due_ms = 0;  // the due time the broker sent (the example worker records it), 0 when not recorded
  std::string payload; // the payload it ran with, "" when not recorded ("-" when long or empty)
  // The traceparent its handler was given, "-" for none; "" when not
  // recorded (a worker, or a run, before trace contexts).
  std::string traceparent;
};

struct WaitSeen {
  std::string id;
  int64_t asked_ms = 0, answered_ms = 0;
  std::string state;  // done, dead, cancelled, pending, unknown
  std::string result, error;
};

struct ProgressSeen {
  std::string id, named;  // the job, and the job its progress text names
  int64_t percent = 0;
};

struct FinalState {
  std::string state;  // done, dead, cancelled, ready, ..., or "" (not found)
  int64_t finished_ms = 0;
  std::string error;
  std::string type;     // "" when not known (a finished job's document no longer kept)
  int64_t attempt = 0;  // 0 when not known
};

struct Tick {
  std::string id;
  int64_t due_ms = 0;
  bool found = false;
};

// A `dueq queue delete` that removed its queue, landing somewhere in
// [from_ms, to_ms] (both 0 when the run did not record when).
struct QueueDelete {
  std::string queue;
  int64_t from_ms = 0, to_ms = 0;
};

// A unique job asked for (unique.tsv): how it was answered, between when.
struct UniqueAsk {
  std::string id;
  std::string unique_key;
  std::string outcome;  // accepted, held (duplicate by its unique key) or unknown
  int64_t sent_ms = 0, answered_ms = 0;
  std::string holder;   // held: the job the broker named (debounce: the job it went into)
  std::string mode = "done";  // done or debounce
  std::string payload;        // its payload (a sleep's ms)
};

// A job of a flow or batch (groups.tsv).
struct GroupJob {
  std::string id;
  std::string group;   // "f..." a flow, "b..." a batch
  std::string parent;  // its flow parent, "" for a root or a batch job
  char policy = '-';   // f, i, c: what its failure does to its parent
  std::string type;
  char role = 'j';     // j, s (success callback), c (complete callback)
  bool surely = true;  // false: its request was never answered
};

struct SearchSeen {
  std::string id;
  int64_t at_ms = 0;
  bool found = false;
  // Of a miss: when its answer came, its summary, and the state a lookup
  // right after found the job in.
  int64_t answered_ms = 0;
  std::string summary = {};
  std::string state_after = {};
};

// How long a job of the ordered queue runs (the example worker's "sleep"
// handler): what the checker takes as a run's length.
inline constexpr int64_t kOrderedRunMs = 40;

// How long a "snooze_once" job asks to wait (its payload): the example
// worker snoozes the first delivery of it each worker process runs.
inline constexpr int64_t kSnoozeMs = 700;
// How long after its due time a job of deadlines.tsv may start.
inline constexpr int64_t kStartWithinMs = 4'000;
// The payload an operator's edit gives a sleep job (edits.tsv).
inline constexpr const char* kEditedPayload = "77";

struct History {
  std::vector<AcceptedJob> accepted;
  std::map<std::string, std::string> keys;  // keys.tsv: id -> key, jobs of the ordered queue
  std::vector<std::string> cancels;
  std::map<std::string, int64_t> reschedules;  // id -> the new due ms asked
  std::map<std::string, std::string> edits;     // edits.tsv: id -> the payload an edit gave it
  std::map<std::string, int64_t> deadlines;     // deadlines.tsv: id -> its start-by ms
  std::map<std::string, std::string> traces;    // traces.tsv: id -> the traceparent it was sent with
  std::set<std::string> deleted_queues;  // deletes.tsv: queues a `dueq queue delete` removed
  std::vector<QueueDelete> deletes;      // deletes.tsv, each line
  std::map<std::string, std::vector<int64_t>> asks;  // asks.tsv: id -> when it was asked for again
  std::vector<SearchSeen> searches;                  // searches.tsv
  std::vector<UniqueAsk> uniques;                    // unique.tsv
  std::vector<GroupJob> group_jobs;                  // groups.tsv
  std::vector<WaitSeen> waits;                       // waits.tsv
  std::vector<ProgressSeen> progress;                 // progress.tsv
  std::vector<FaultSpan> faults;
  std::vector<Start> starts;
  std::map<std::string, FinalState> finals;
  std::vector<Tick> ticks;
  std::map<std::string, int64_t> facts;

  // The fact, or `otherwise` when the run did not record it.
  int64_t fact(const std::string& name, int64_t otherwise = -1) const;
};

// Reads every file above from `dir`; a line that does not parse is an
// error naming the file and line.
std::optional<History> read_history(const std::filesystem::path& dir, std::string& error);

// Tab-separated writers, one line per call, used by the run.
std::string hex(const std::string& bytes);
std::string unhex(const std::string& text);
void append_line(const std::filesystem::path& file, const std::vector<std::string>& fields);

}  // namespace dueq::nemesis
