#pragma once
// What a worker holds: the deliveries it received and has no result for
// (listed in every HELLO and heartbeat, so the broker keeps their leases),
// the cancel flag of each one a handler may run, and the results sent and
// not yet confirmed by the broker (sent again after a new WELCOME). Keyed
// by queue and id; a delivery is matched by its token, so a stale one never
// touches a newer delivery of the same job. The worker loop's own.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/protocol.hpp"
#include "worker/handler_pool.hpp"

namespace dueq::worker {

class HeldJobs {
 public:
  bool holds_job(const std::string& queue, const std::string& id) const { return held_.contains(key(queue, id)); }
  bool holds(const proto::JobRef& ref) const {
    auto it = held_.find(key(ref.queue, ref.id));
    return it != held_.end() && it->second.token == ref.token;
  }
  // This very delivery is held, or ran and its result awaits confirmation.
  bool knows(const proto::JobRef& ref) const {
    auto it = unconfirmed_.find(key(ref.queue, ref.id));
    return holds(ref) || (it != unconfirmed_.end() && it->second.token == ref.token);
  }
  // A delivery arrived (replacing an older delivery of the same job).
  void hold(const proto::JobRef& ref) { held_[key(ref.queue, ref.id)] = ref; }
  // The cancel flag a handler of this delivery watches.
  std::shared_ptr<CancelState> cancel_state(const proto::JobRef& ref);
  // The delivery is no longer this worker's (handed back, dropped).
  void forget(const proto::JobRef& ref);
  // Its result is going to the broker: no longer held, kept until confirmed.
  void finished(const proto::JobResult& result);
  void confirmed(const proto::JobRef& ref);
  // A user cancelled a delivery this worker holds and a handler runs: its
  // handler is asked to stop (the exec handler kills its command).
  void stop_running(const proto::JobRef& ref);
  // Every handler is asked to stop (drain timeout, exit).
  void stop_all();

  std::vector<proto::JobRef> refs() const;
  std::vector<proto::JobResult> unconfirmed() const;
  bool empty() const { return held_.empty(); }
  bool all_confirmed() const { return unconfirmed_.empty(); }

 private:
  static std::string key(const std::string& queue, const std::string& id) { return queue + '\n' + id; }

  std::unordered_map<std::string, proto::JobRef> held_;                        // received, no result yet
  std::unordered_map<std::string, std::shared_ptr<CancelState>> cancel_states_;
  std::unordered_map<std::string, proto::JobResult> unconfirmed_;               // result sent, not confirmed
};

}  // namespace dueq::worker
