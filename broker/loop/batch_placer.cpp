#include "broker/loop/batch_placer.hpp"

namespace dueq::broker {

BatchPlacer::BatchPlacer(const std::vector<Slot>& slots, size_t first) {
  free_.reserve(slots.size());
  below_half_.reserve(slots.size());
  for (const Slot& s : slots) {
    free_.push_back(s.free);
    below_half_.push_back(s.free - s.capacity / 2);
  }
  pack_at_ = slots.empty() ? 0 : first % slots.size();
  spread_next_ = pack_at_;
}

// The first worker from `from` on (in turn) for which `has_room` holds.
// Room only ever shrinks: neither search looks back.
template <class HasRoom>
std::optional<size_t> BatchPlacer::first_from(size_t from, HasRoom has_room) const {
  for (size_t k = 0; k < free_.size(); ++k)
    if (const size_t i = (from + k) % free_.size(); has_room(i)) return i;
  return std::nullopt;
}

std::optional<size_t> BatchPlacer::next() {
  std::optional<size_t> found;
  if (packing_) {
    found = first_from(pack_at_, [&](size_t i) { return below_half_[i] > 0; });
    if (found) pack_at_ = *found;
    else packing_ = false;
  }
  if (!found) {
    found = first_from(spread_next_, [&](size_t i) { return free_[i] > 0; });
    if (found) spread_next_ = *found + 1;
  }
  if (found) {
    --free_[*found];
    --below_half_[*found];
  }
  return found;
}

}  // namespace dueq::broker
