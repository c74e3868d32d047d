#pragma once
// ReservedCounts: what lease calls still out have counted, by name (a
// worker's free slots, a queue's room under its concurrency limit). A count
// that falls to zero or below leaves the table, so that its size is the
// number of names with calls out. Pure state.
#include <cstdint>
#include <map>
#include <string>

namespace dueq::broker {

class ReservedCounts {
 public:
  void add(const std::string& name, int64_t n) { counts_[name] += n; }
  void remove(const std::string& name, int64_t n) {
    auto it = counts_.find(name);
    if (it == counts_.end()) return;
    it->second -= n;
    if (it->second <= 0) counts_.erase(it);
  }
  int64_t of(const std::string& name) const {
    const auto it = counts_.find(name);
    return it == counts_.end() ? 0 : it->second;
  }
  size_t size() const { return counts_.size(); }

 private:
  std::map<std::string, int64_t> counts_;
};

}  // namespace dueq::broker
