#pragma once
// Who is connected and what they can take: workers by ZeroMQ routing id, the
// queues each serves, their capacity, and when each was last heard from.
#include <algorithm>
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

  // Live, non-draining workers serving `queue`, each with how many more jobs
  // it can take (`held` counts what it holds now).
  template <typename HeldFn>
  std::vector<std::pair<std::string, int64_t>> free_slots(const std::string& queue, HeldFn held) const {
    std::vector<std::pair<std::string, int64_t>> out;
    for (const auto& [rid, w] : workers_) {
      if (w.draining || std::find(w.queues.begin(), w.queues.end(), queue) == w.queues.end()) continue;
      const int64_t free = static_cast<int64_t>(w.capacity) - held(rid);
      if (free > 0) out.emplace_back(rid, free);
    }
    return out;
  }

  size_t size() const { return workers_.size(); }
  bool serves(const std::string& queue) const {
    for (const auto& [rid, w] : workers_)
      if (std::find(w.queues.begin(), w.queues.end(), queue) != w.queues.end()) return true;
    return false;
  }

 private:
  std::unordered_map<std::string, WorkerInfo> workers_;
};

}  // namespace dueq::broker
