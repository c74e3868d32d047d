#include "broker/loop/slot_allotter.hpp"

#include <algorithm>

namespace dueq::broker {

std::vector<SlotAllotter::Share> SlotAllotter::shares_of(const Worker& w, const std::map<std::string, int64_t>& room) {
  std::vector<Share> shares;
  if (w.queues == nullptr) return shares;
  for (size_t i = 0; i < w.queues->size(); ++i)
    if (room.contains((*w.queues)[i]))
      shares.push_back({&(*w.queues)[i], w.weights != nullptr && i < w.weights->size() ? (*w.weights)[i] : 1});
  return shares;
}

SlotAllotter::Allotment SlotAllotter::allot(const std::vector<Worker>& workers, const std::map<std::string, Call>& calls) {
  std::map<std::string, int64_t> room;  // queue -> jobs its lease call may still take
  std::set<std::string> limited;        // queues held below lease_batch by their limits
  for (const auto& [queue, call] : calls) {
    room[queue] = call.room;
    if (call.limited) limited.insert(queue);
  }
  Allotment out;
  for (const Worker& w : workers) {
    const std::vector<Share> shares = shares_of(w, room);
    if (shares.empty()) continue;
    if (shares.size() == 1 || w.strict) {
      int64_t& left = room[*shares.front().queue];
      const int64_t n = std::min(w.free, left);
      out[*shares.front().queue][w.id] = n;
      left -= n;
      continue;
    }
    share_by_weight(w, shares, room, limited, out);
  }
  return out;
}

// Slot by slot, the queue whose counter plus weight is highest takes it and
// gives back the weights' total. Once the queue whose turn it is has no room
// left in this round's lease call (lease_batch), the worker's other free
// slots wait for the next round (at once): given to the other queues, they
// would tilt the shares. A queue held to less by its limits drops out
// instead, so that its limit idles no other queue.
void SlotAllotter::share_by_weight(const Worker& w, const std::vector<Share>& shares,
                                   std::map<std::string, int64_t>& room, const std::set<std::string>& limited,
                                   Allotment& out) {
  auto& counters = turns_[w.id];
  auto takes_part = [&](const Share& s) { return room[*s.queue] > 0 || !limited.contains(*s.queue); };
  for (int64_t k = 0; k < w.free; ++k) {
    const Share* best = nullptr;
    int64_t total = 0;
    for (const auto& s : shares) {
      if (!takes_part(s)) continue;
      total += s.weight;
      if (best == nullptr || counters[*s.queue] + s.weight > counters[*best->queue] + best->weight) best = &s;
    }
    if (best == nullptr || room[*best->queue] <= 0) break;
    for (const auto& s : shares)
      if (takes_part(s)) counters[*s.queue] += s.weight;
    counters[*best->queue] -= total;
    ++out[*best->queue][w.id];
    --room[*best->queue];
  }
}

void SlotAllotter::forget(const std::function<bool(const std::string& worker)>& gone) {
  std::erase_if(turns_, [&](const auto& entry) { return gone(entry.first); });
}

int64_t SlotAllotter::counter(const std::string& worker, const std::string& queue) const {
  const auto w = turns_.find(worker);
  if (w == turns_.end()) return 0;
  const auto q = w->second.find(queue);
  return q == w->second.end() ? 0 : q->second;
}

}  // namespace dueq::broker
