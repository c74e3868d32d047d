#pragma once
// WAIT requests (docs/protocol.md): a client waits for a job's end. Each is
// answered when the loop applies the job's ack (at once, with the result it
// carried), or when a read of the job's states (lua/job_ends.lua) finds it
// done, dead or cancelled, or with "pending" at its timeout. Reads go out
// for a request when it comes (the job may have ended already), for a
// queue whose jobs may have ended another way (a nack to dead, a cancel),
// and for every waiting request once a second, which also finds ends this
// broker did not see (another leader's, before a take-over).
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker/loop/outbox.hpp"
#include "broker/store/round.hpp"
#include "common/clock.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

// What a WAIT is answered with (state and the rest of WAIT_REPLY).
struct JobEnd {
  std::string state;  // done, dead, cancelled, pending, unknown
  int64_t finished_ms = 0;
  std::string result;  // done
  std::string error;   // dead
};

namespace calls {
// job_ends.lua for at most kJobEndsPerCall ids of one queue.
inline constexpr size_t kJobEndsPerCall = 500;
Command job_ends(const std::string& queue, const std::vector<std::string>& ids);
// nullopt for a job that has not ended.
Result<std::vector<std::optional<JobEnd>>> parse_job_ends(const redisReply* reply, size_t ids);
}  // namespace calls

// The requests waiting, by job; pure state (unit-tested).
class WaitRegistry {
 public:
  static constexpr size_t kMaxPerPeer = 1'000;
  static constexpr size_t kMax = 10'000;

  struct Waiter {
    Peer peer;
    uint64_t request_id = 0;
    int64_t deadline_ms = 0;  // steady
    uint64_t seq = 0;         // set by add(): the order of registration
    bool read = false;        // a read of the job's state sent after it came found no end
  };
  // A waiter past its deadline is answered "pending" only once a read sent
  // after it came found the job not ended (a wait of timeout 0 answers what
  // Redis holds), or this long past its deadline (Redis unreachable).
  static constexpr int64_t kUnreadGraceMs = 1'000;
  using JobKey = std::pair<std::string, std::string>;  // queue, id

  // False past kMaxPerPeer of the peer's, or kMax in all. The same request
  // again (a client's resend) replaces the first.
  bool add(const std::string& queue, const std::string& id, Waiter waiter);
  // Every request waiting for the job, taken out.
  std::vector<Waiter> take(const std::string& queue, const std::string& id);
  // Requests past their deadline, taken out, with their jobs.
  std::vector<std::pair<JobKey, Waiter>> take_expired(int64_t now_ms);
  // A read sent when `up_to_seq` was the last registration found the job
  // not ended: its waiters registered by then have been read.
  void mark_read(const std::string& queue, const std::string& id, uint64_t up_to_seq);
  uint64_t last_seq() const { return next_seq_; }
  // The ids waited for in `queue`.
  std::vector<std::string> ids(const std::string& queue) const;
  std::vector<std::string> queues() const;
  bool waits_for(const std::string& queue, const std::string& id) const { return by_job_.contains({queue, id}); }
  int64_t earliest_deadline_ms() const { return deadlines_.empty() ? -1 : *deadlines_.begin(); }
  size_t size() const { return size_; }

 private:
  std::map<JobKey, std::vector<Waiter>> by_job_;
  std::unordered_map<std::string, size_t> per_peer_;
  std::multiset<int64_t> deadlines_;  // of every waiter
  size_t size_ = 0;
  uint64_t next_seq_ = 0;
  void forget(const Waiter& waiter);
};

class Waits {
 public:
  static constexpr int64_t kRecheckMs = 1'000;

  Waits(const Clock& clock, Outbox& outbox) : clock_(clock), outbox_(outbox) {}

  void on_wait(const Peer& peer, const proto::WaitRequest& request);
  // The loop applied the job's end (an ack): its requests are answered.
  void ended(const std::string& queue, const std::string& id, const JobEnd& end);
  // Jobs of `queue` may have ended in a way the loop does not follow.
  void changed(const std::string& queue) {
    if (registry_.size() > 0) dirty_.insert(queue);
  }
  bool waits_for(const std::string& queue, const std::string& id) const { return registry_.waits_for(queue, id); }
  bool idle() const { return registry_.size() == 0; }
  // Timeouts answered "pending"; the reads due go in `round`.
  void add_to(Round& round);
  bool has_work() const { return !fresh_.empty() || !dirty_.empty(); }
  // Microseconds until a timeout or the next read of every request; -1 when none waits.
  int64_t us_until_next() const;

 private:
  void read(Round& round, const std::string& queue, std::vector<std::string> ids);
  void answer(const WaitRegistry::Waiter& waiter, const JobEnd& end);

  const Clock& clock_;
  Outbox& outbox_;
  WaitRegistry registry_;
  std::map<std::string, std::set<std::string>> fresh_;  // queue -> ids of new requests
  std::set<std::string> dirty_;                         // queues to read whole
  int64_t next_recheck_ms_ = 0;                         // steady
};

}  // namespace dueq::broker
