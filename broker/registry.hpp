#pragma once
// Who is connected and what they can take: workers by ZeroMQ routing id, the
// queues each serves, their capacity, and when each was last heard from.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dueq::broker {

struct WorkerInfo {
  std::string worker_id;
  std::vector<std::string> queues;
  uint32_t capacity = 0;
  bool draining = false;
  int64_t last_seen_ms = 0;
};

class WorkerRegistry {
 public:
  void upsert(const std::string& routing_id, WorkerInfo info) { workers_[routing_id] = std::move(info); }
  WorkerInfo* find(const std::string& routing_id) {
    auto it = workers_.find(routing_id);
    return it == workers_.end() ? nullptr : &it->second;
  }
  void remove(const std::string& routing_id) { workers_.erase(routing_id); }

  // Routing ids of workers not heard from since `cutoff_ms`.
  std::vector<std::string> silent_since(int64_t cutoff_ms) const {
    std::vector<std::string> out;
    for (const auto& [rid, w] : workers_)
      if (w.last_seen_ms < cutoff_ms) out.push_back(rid);
    return out;
  }

  // Earliest last_seen among workers, to know when the next one can expire.
  int64_t oldest_seen_ms() const {
    int64_t oldest = INT64_MAX;
    for (const auto& [rid, w] : workers_) oldest = std::min(oldest, w.last_seen_ms);
    return oldest;
  }

  // Jobs of `queue` the live, non-draining workers can hold at once.
  int64_t capacity_for(const std::string& queue) const {
    int64_t total = 0;
    for (const auto& [rid, w] : workers_) {
      if (w.draining) continue;
      for (const auto& q : w.queues)
        if (q == queue) total += w.capacity;
    }
    return total;
  }

  size_t size() const { return workers_.size(); }

 private:
  std::unordered_map<std::string, WorkerInfo> workers_;
};

}  // namespace dueq::broker
