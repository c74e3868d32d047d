#pragma once
// The nemesis checker's rule for the ordered queue (docs/keys.md): a key's
// jobs run one at a time, a job does not run again once a later job of its
// key took the turn, and a key's jobs first start in due order. Pure, like
// the rest of the checker; faults that explain a start again excuse what
// they overlap (Redis losing writes in a fail-over can undo an ack).
#include <functional>
#include <string>
#include <vector>

#include "tests/nemesis/history.hpp"

namespace dueq::nemesis {

struct KeyOrderFindings {
  size_t keyed_jobs = 0, keys = 0;
  // What a fault explains: runs of a key that overlapped or a job run
  // again after a later one took the turn (a store that lost writes, or a
  // delivery a fault held back or cut off that starts after the job was
  // handed out again: any job may run twice so), and jobs that started
  // before an earlier-due one.
  size_t excused_turns = 0, excused_order = 0;
  std::vector<std::string> violations;
};

// `blame(before_us, after_us)`: the fault that explains two starts at these
// times, or nullptr. `promote_slack_ms`: how long after its due time a job
// may still be in the schedule while a later-due job of its key, already
// ready, goes first.
KeyOrderFindings check_key_order(const History& history,
                                 const std::function<const FaultSpan*(int64_t, int64_t)>& blame,
                                 int64_t promote_slack_ms = 1'000);

}  // namespace dueq::nemesis
