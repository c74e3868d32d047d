#pragma once
// The nemesis checker's rules for flows and batches (docs/flows.md), over
// groups.tsv: no job of a stored flow or batch is lost or left unfinished;
// a parent starts only after each child first started and after the end the
// broker wrote for it, and runs at most once; a parent whose child failed
// under fail_parent is dead, naming such a child, and never ran; a parent
// whose children all settled otherwise is done; a closed batch's complete
// callback runs once, after every member started and ended, and its success
// callback too when every member is done, else it is cancelled and never
// ran. Pure, like the rest of the checker; a fault near excuses what it may
// explain (a broker's clock stepped, a fail-over that loses an acknowledged
// write and runs both again), never a start before a child ever started.
#include <functional>
#include <string>
#include <vector>

#include "tests/nemesis/history.hpp"

namespace dueq::nemesis {

struct GroupFindings {
  size_t flows = 0, batches = 0, jobs = 0;
  size_t parents_ran = 0, parents_failed = 0;        // flow parents done, and dead by a child
  size_t callbacks_ran = 0, successes_cancelled = 0;  // batch callbacks done, success callbacks cancelled
  size_t excused = 0;                                 // what a fault near explains
  std::vector<std::string> violations;
};

GroupFindings check_groups(const History& history, const std::function<const FaultSpan*(int64_t, int64_t)>& fault_near);

}  // namespace dueq::nemesis
