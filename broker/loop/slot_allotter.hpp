#pragma once
// SlotAllotter: how one lease round shares each worker's free slots among
// the queues it serves that lease in that round. A worker of one such queue,
// or a strict one, gives them all to the first of its queues in its order; a
// worker of several shares them by its weights with a smooth weighted
// round-robin whose counters carry over from round to round, so that over
// many rounds each queue gets its weight's share however few slots are free
// at a time. Pure state: no Redis, no sockets, no clock.
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace dueq::broker {

class SlotAllotter {
 public:
  // A worker with free slots, and the queues it serves in its order.
  struct Worker {
    std::string id;
    int64_t free = 0;
    const std::vector<std::string>* queues = nullptr;
    const std::vector<uint32_t>* weights = nullptr;  // one per queue; a missing one is 1
    bool strict = false;
  };
  // A queue that leases this round: how many jobs its lease call may take,
  // and whether its limits (not lease_batch) hold it to that.
  struct Call {
    int64_t room = 0;
    bool limited = false;
  };
  using Allotment = std::map<std::string, std::map<std::string, int64_t>>;  // queue -> worker -> slots

  Allotment allot(const std::vector<Worker>& workers, const std::map<std::string, Call>& calls);
  // Drops the counters of workers for which `gone` holds.
  void forget(const std::function<bool(const std::string& worker)>& gone);
  // The round-robin counter of `queue` at `worker` (0 when it has none).
  int64_t counter(const std::string& worker, const std::string& queue) const;

 private:
  struct Share {
    const std::string* queue;
    uint32_t weight;
  };
  static std::vector<Share> shares_of(const Worker& w, const std::map<std::string, int64_t>& room);
  void share_by_weight(const Worker& w, const std::vector<Share>& shares, std::map<std::string, int64_t>& room,
                       const std::set<std::string>& limited, Allotment& out);

  std::map<std::string, std::map<std::string, int64_t>> turns_;  // worker -> queue -> counter
};

}  // namespace dueq::broker
