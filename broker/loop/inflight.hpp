#pragma once
// Jobs the broker has leased and not yet seen finished. Redis holds the
// authoritative lease (token + deadline); this table is what the broker needs
// in memory: dispatch credit per worker, which worker holds what, and when a
// lease needs extending.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dueq::broker {

// One delivery of a job: its id and the fencing token of its lease.
struct TokenRef {
  std::string id;
  uint64_t token = 0;
};

struct InflightJob {
  std::string queue;
  std::string id;
  uint64_t token = 0;
  std::string worker;         // routing id of the worker it was sent to (or that reported it)
  int64_t lease_deadline_ms = 0;
  // Its holder listed it as held (HELLO/HEARTBEAT): its lease is extended
  // from then on whenever it runs short.
  bool reported = false;
  // Its holder announced its start (STARTING): losing it now uses an
  // attempt, and extend.lua recorded the start in Redis for a broker that
  // replaces this one (lua/lib/lost_delivery.lua).
  bool started = false;
  uint64_t frame_seq = 0;  // the TASKS frame it went out in (0: adopted from a HELLO)
  // When it was delivered (lease clock; for a job adopted from a HELLO, when
  // it was adopted): its lease is renewed until max_run_time after this.
  int64_t delivered_ms = 0;
  // Adopted from a HELLO by its token alone (the broker did not know it):
  // it confirms its holder (lifts the 16-job credit) once Redis extends its
  // lease, which shows the token is current, and not before.
  bool confirms_holder = false;
  // Delivered with start_check 2 (announce_alone): its worker runs nothing
  // else while it runs, so a crash then names it.
  bool alone = false;
  std::string type;  // its handler name, for the run-time histogram ("" when adopted from a HELLO)
  // Its handler's last progress report (PROGRESS; -1: none yet), and when
  // it reached the broker (lease clock). Kept for this delivery only.
  int32_t progress_percent = -1;
  std::string progress_text;
  int64_t progress_ms = 0;
};

class InflightTable {
 public:
  static std::string key(const std::string& queue, const std::string& id) { return queue + '\n' + id; }

  void add(InflightJob job) {
    auto k = key(job.queue, job.id);
    if (auto it = jobs_.find(k); it != jobs_.end()) erase(it);
    ++per_worker_[job.worker];
    ++per_queue_[job.queue];
    jobs_.emplace(std::move(k), std::move(job));
  }

  // Moves a job to the worker that reports holding it.
  void assign(InflightJob& job, const std::string& worker) {
    if (job.worker == worker) return;
    --per_worker_[job.worker];
    job.worker = worker;
    ++per_worker_[worker];
  }

  InflightJob* find(const std::string& queue, const std::string& id) {
    auto it = jobs_.find(key(queue, id));
    return it == jobs_.end() ? nullptr : &it->second;
  }
  const InflightJob* find(const std::string& queue, const std::string& id) const {
    auto it = jobs_.find(key(queue, id));
    return it == jobs_.end() ? nullptr : &it->second;
  }

  // Removes the entry when its token matches (a stale result leaves the
  // current delivery's entry alone); says when that delivery started (0:
  // no entry removed).
  int64_t remove(const std::string& queue, const std::string& id, uint64_t token) {
    auto it = jobs_.find(key(queue, id));
    if (it == jobs_.end() || it->second.token != token) return 0;
    const int64_t delivered_ms = std::max<int64_t>(it->second.delivered_ms, 1);
    erase(it);
    return delivered_ms;
  }

  std::vector<InflightJob> take_held_by(const std::string& worker) {
    std::vector<InflightJob> out;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second.worker == worker) {
        out.push_back(it->second);
        it = erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

  // Drops entries whose lease ran out by `now_ms`: Redis reclaims those, and
  // a re-lease comes back with a new token.
  // Drops the jobs whose lease ran out; `on_expired` sees each first.
  template <typename OnExpired>
  size_t expire(int64_t now_ms, OnExpired on_expired) {
    size_t dropped = 0;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second.lease_deadline_ms <= now_ms) {
        on_expired(it->second);
        it = erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    return dropped;
  }

  // The broker itself did not listen for a while (StallWatch): the leases
  // that would run out before `until_ms` are held until then, so that their
  // workers can report them first; `hold` sees each (to extend it in Redis).
  template <typename Hold>
  size_t hold_until(int64_t until_ms, Hold hold) {
    size_t held = 0;
    for (auto& [key, job] : jobs_) {
      if (job.lease_deadline_ms >= until_ms) continue;
      job.lease_deadline_ms = until_ms;
      hold(job);
      ++held;
    }
    return held;
  }

  template <typename Visit>
  void for_each(Visit visit) const {
    for (const auto& [key, job] : jobs_) visit(job);
  }

  int64_t count_for_worker(const std::string& worker) const {
    auto it = per_worker_.find(worker);
    return it == per_worker_.end() ? 0 : it->second;
  }
  int64_t count_for_queue(const std::string& queue) const {
    auto it = per_queue_.find(queue);
    return it == per_queue_.end() ? 0 : it->second;
  }
  size_t size() const { return jobs_.size(); }

 private:
  using Map = std::unordered_map<std::string, InflightJob>;
  Map::iterator erase(Map::iterator it) {
    if (--per_worker_[it->second.worker] == 0) per_worker_.erase(it->second.worker);
    if (--per_queue_[it->second.queue] == 0) per_queue_.erase(it->second.queue);
    return jobs_.erase(it);
  }

  Map jobs_;
  std::unordered_map<std::string, int64_t> per_worker_;
  std::unordered_map<std::string, int64_t> per_queue_;  // what a concurrency limit counts
};

}  // namespace dueq::broker
