#pragma once
// The nemesis checker's rule for unique jobs (docs/keys.md): of the jobs
// with one unique key (held until done), none is accepted while another is
// surely unfinished, and a job answered duplicate by its unique key names a
// job of that key that had not surely finished when it was asked; a job
// debounced into another names a debounced job of its key that had not
// surely started, and a debounced job runs with the payload of the last job
// debounced into it. Pure,
// like the rest of the checker; a fault near the two jobs excuses what it
// may explain (a fail-over that loses an ack runs the holder again, and a
// clock stepped moves the finish times the broker writes).
#include <functional>
#include <string>
#include <vector>

#include "tests/nemesis/history.hpp"

namespace dueq::nemesis {

struct UniqueFindings {
  size_t accepted = 0, held = 0, keys = 0;
  size_t debounced = 0;  // of held: answered debounced into a scheduled job
  size_t excused = 0;  // what a fault near, or a job run again, explains
  std::vector<std::string> violations;
};

// `fault_near(from_ms, to_ms)`: a fault that may explain what happened
// between these times, or nullptr.
UniqueFindings check_unique_holds(const History& history,
                                  const std::function<const FaultSpan*(int64_t, int64_t)>& fault_near);

}  // namespace dueq::nemesis
