#pragma once
// BatchPlacer: which worker each job of a leased batch goes to. The batch
// goes to the worker whose turn it is while that worker holds less than
// half its capacity, then to the next one: with short jobs (a large
// adaptive capacity) a round's batch is one TASKS frame that wakes one
// worker, where one job each in turn woke every worker for a few jobs. Past
// half of every worker's capacity jobs go one each in turn: a worker's
// capacity is about twice its concurrency when jobs are long, so no
// worker's buffer fills while another has idle handlers. Pure state.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace dueq::broker {

class BatchPlacer {
 public:
  struct Slot {
    int64_t free = 0;
    int64_t capacity = 0;
  };
  // `first`: the worker whose turn it is (taken modulo the number of slots).
  BatchPlacer(const std::vector<Slot>& slots, size_t first);
  // The worker of the next job (one of its free slots is taken), or nullopt
  // when none has a free slot.
  std::optional<size_t> next();

 private:
  template <class HasRoom>
  std::optional<size_t> first_from(size_t from, HasRoom has_room) const;

  std::vector<int64_t> free_;
  std::vector<int64_t> below_half_;
  size_t pack_at_ = 0;
  size_t spread_next_ = 0;
  bool packing_ = true;
};

}  // namespace dueq::broker
