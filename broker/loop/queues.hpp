#pragma once
// What the event loop knows about each queue between rounds. Redis holds the
// truth; these are the hints that tell the loop which calls a round needs
// (promote when something is due, reclaim when a lease ran out, lease when
// jobs may be ready and workers have credit), so it never polls.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

namespace dueq::broker {

struct QueueState {
  std::string name;
  int64_t next_due_ms = -1;       // earliest scheduled due time known (wall clock), -1 none
  int64_t next_deadline_ms = -1;  // earliest lease deadline known (lease clock), -1 none
  bool maybe_ready = false;       // the ready list may hold jobs
  // A lease parked jobs behind their key's limit (lua/lib/keys.lua): every
  // ack or nack may release a turn, so each makes the queue lease again.
  bool keys_parked = false;
  bool ready_this_round = false;  // a call in the round being built may make jobs ready
  bool registered = false;        // name written to the queue registry
  // Behind a Redis Cluster: its registration is in a round (registering),
  // or was confirmed and its encoding pins go before its first write
  // (pin_pending; Enqueuer::ready_for_writes).
  bool registering = false;
  bool pin_pending = false;
  // A delete_queue call is out (QueueRemover): writes built meanwhile
  // register the queue again first, whatever `registered` says.
  bool deleting = false;
  // A write for it was sent: Redis may hold its jobs though `registered`
  // is not confirmed (the round's reply was lost, or a delete came first).
  bool written = false;
  // `dueq pause`: the queue leases nothing until resumed. Learned from the
  // admin thread's pause and resume, and from a lease call that found the
  // queue paused in Redis (after a restart or a take-over).
  bool paused = false;
  // Lease clock: a limit held the queue back; no lease call before then.
  int64_t lease_after_ms = 0;
  // Lease clock: when the first job parked for its key's rate limit may run
  // (lua/lib/keys.lua); the queue leases again then. 0: none waits.
  int64_t key_wake_ms = 0;
  // Whether the ready list may hold jobs at `now_ms` (lease clock): a key's
  // next token counts as a job made ready.
  bool may_have_ready(int64_t now_ms) const { return maybe_ready || (key_wake_ms > 0 && key_wake_ms <= now_ms); }
  // A script released a job held for its group (a flow parent, a batch
  // callback: lua/lib/group.lua) at DUE_MS (-1: none): to the ready set when
  // that has passed (the lease call looks), else promote then.
  void released_at(int64_t due_ms) {
    if (due_ms < 0) return;
    maybe_ready = true;
    if (next_due_ms < 0 || due_ms < next_due_ms) next_due_ms = due_ms;
  }
  size_t rotation = 0;            // spreads single jobs over the workers in turn
  // Steady clock: when done/cancelled entries past retention are next
  // removed (the last sweep's reply says when; Scheduler::add_sweep).
  int64_t next_sweep_ms = 0;
  // Steady clock: an enqueue found max_backlog reached; until then new jobs
  // are answered overloaded without a trip to Redis (a producer that keeps
  // pushing into a full queue then costs Redis nothing).
  int64_t backlog_full_until_ms = 0;
  // Jobs of the queue finished: done_max may be exceeded, so a sweep comes
  // within a second (sooner if one was due anyway).
  void sweep_soon(int64_t steady_now_ms) { next_sweep_ms = std::min(next_sweep_ms, steady_now_ms + kSweepAfterFinishMs); }
  static constexpr int64_t kSweepAfterFinishMs = 1'000;
};

inline int64_t earliest_known(int64_t a, int64_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return a < b ? a : b;
}

class QueueTable {
 public:
  QueueState& get(const std::string& name) {
    auto it = queues_.find(name);
    if (it != queues_.end()) return it->second;
    QueueState q;
    q.name = name;
    return queues_.emplace(name, std::move(q)).first->second;
  }
  void erase(const std::string& name) { queues_.erase(name); }
  QueueState* find(const std::string& name) {
    auto it = queues_.find(name);
    return it == queues_.end() ? nullptr : &it->second;
  }
  const QueueState* find(const std::string& name) const {
    auto it = queues_.find(name);
    return it == queues_.end() ? nullptr : &it->second;
  }
  // After a restart or a reconnect the loop does not know what is due,
  // leased or ready: the next round promotes and reclaims every registered
  // or written queue, and their replies bring the times up to date. A queue
  // neither registered nor written to (only named by a worker) has nothing
  // in Redis to ask for.
  void forget_times() {
    for (auto& [name, q] : queues_) {
      if (!q.registered && !q.written) continue;
      q.next_due_ms = 0;
      q.next_deadline_ms = 0;
      q.maybe_ready = true;
    }
  }
  // The first queue named `name` or after it.
  auto lower_bound(const std::string& name) { return queues_.lower_bound(name); }
  auto begin() { return queues_.begin(); }
  auto end() { return queues_.end(); }
  auto begin() const { return queues_.begin(); }
  auto end() const { return queues_.end(); }
  size_t size() const { return queues_.size(); }

 private:
  std::map<std::string, QueueState> queues_;
};

}  // namespace dueq::broker
