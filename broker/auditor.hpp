#pragma once
// Checks a queue's books: the conservation law (every accepted job is done,
// cancelled, purged, dead, scheduled, ready or leased, exactly once) and that
// every job record and every state-set entry agree. Reads in bounded slices;
// each slice is checked atomically in Redis by audit.lua, so jobs moving
// while the audit runs are not reported as problems.
#include <string>
#include <utility>
#include <vector>

#include "broker/store.hpp"

namespace dueq::broker {

struct AuditReport {
  std::string queue;
  AuditCounts counts;
  std::vector<std::pair<std::string, std::string>> problems;  // id, description
  std::vector<std::string> repaired;                           // dangling entries removed, filter counters corrected
  bool clean() const { return counts.imbalance() == 0 && problems.empty(); }
};

// With `repair`, entries whose job record is gone are removed (always safe:
// they can never be delivered), schedule filter counters are made exact, and
// both are listed in `repaired` instead of `problems`.
Result<AuditReport> audit_queue(Store& store, const std::string& queue, bool repair);

}  // namespace dueq::broker
