#pragma once
// Jobs the broker has leased and not yet seen finished. Redis holds the
// authoritative lease (token + deadline); this table is what the broker needs
// in memory: dispatch credit per queue, which worker holds what, and when a
// lease needs extending.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dueq::broker {

struct InflightJob {
  std::string queue;
  std::string id;
  uint64_t token = 0;
  std::string worker;         // routing id once a worker reported it; "" before
  int64_t lease_deadline_ms = 0;
};

class InflightTable {
 public:
  static std::string key(const std::string& queue, const std::string& id) { return queue + '\n' + id; }

  void add(InflightJob job) {
    auto k = key(job.queue, job.id);
    auto [it, inserted] = jobs_.insert_or_assign(std::move(k), std::move(job));
    if (inserted) ++per_queue_[it->second.queue];
  }

  InflightJob* find(const std::string& queue, const std::string& id) {
    auto it = jobs_.find(key(queue, id));
    return it == jobs_.end() ? nullptr : &it->second;
  }

  // Removes the entry when its token matches (a stale result leaves the
  // current delivery's entry alone).
  bool remove(const std::string& queue, const std::string& id, uint64_t token) {
    auto it = jobs_.find(key(queue, id));
    if (it == jobs_.end() || it->second.token != token) return false;
    --per_queue_[queue];
    jobs_.erase(it);
    return true;
  }

  std::vector<InflightJob> take_held_by(const std::string& worker) {
    std::vector<InflightJob> out;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second.worker == worker) {
        --per_queue_[it->second.queue];
        out.push_back(std::move(it->second));
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

  // Drops entries whose lease ran out by `now_ms`: Redis reclaims those, and
  // a re-lease comes back with a new token.
  size_t expire(int64_t now_ms) {
    size_t dropped = 0;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second.lease_deadline_ms <= now_ms) {
        --per_queue_[it->second.queue];
        it = jobs_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    return dropped;
  }

  int64_t count(const std::string& queue) const {
    auto it = per_queue_.find(queue);
    return it == per_queue_.end() ? 0 : it->second;
  }
  size_t size() const { return jobs_.size(); }

 private:
  std::unordered_map<std::string, InflightJob> jobs_;
  std::unordered_map<std::string, int64_t> per_queue_;
};

}  // namespace dueq::broker
