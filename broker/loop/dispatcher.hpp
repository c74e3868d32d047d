#pragma once
// Dispatcher: leases ready jobs for the capacity workers have free (credit)
// and hands each to one worker in TASKS frames over the ROUTER socket. A
// queue leases at most the free slots of its live, non-draining workers,
// minus the leases rounds still in Redis asked for, so a slow or dead worker
// never accumulates a backlog and mass recovery stays bounded.
#include <map>
#include <string>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/loop/metrics.hpp"
#include "broker/loop/inflight.hpp"
#include "broker/store/job_record.hpp"
#include "broker/loop/outbox.hpp"
#include "broker/loop/queues.hpp"
#include "broker/loop/registry.hpp"
#include "broker/loop/reserved_counts.hpp"
#include "broker/loop/results.hpp"
#include "broker/store/round.hpp"
#include "broker/loop/slot_allotter.hpp"
#include "common/clock.hpp"

namespace dueq::broker {

struct LeasedJob {
  std::string id;
  JobRecord record;
  uint32_t attempt = 0;
  uint64_t token = 0;
  proto::StartCheck start_check = proto::StartCheck::none;  // from the deliveries that ended unstarted (lease.lua)
};

// What one lease call took: the jobs to deliver, and the deliveries whose
// stored record does not decode (each goes to the dead letters as an
// "unreadable record"; the rest of the batch is delivered).
// What held a lease call back (lua/lease.lua): nothing (the ready set ran
// out), a pause, or one of the queue's limits.
// keys: jobs were parked behind their key's limit (wait_ms 1: others may
// wait behind them), or (wait_ms 0) every ready job is parked.
enum class LeaseHold { none = 0, paused = 1, concurrency = 2, rate = 3, keys = 4 };

struct LeaseBatch {
  std::vector<LeasedJob> jobs;
  std::vector<NackItem> unreadable;
  LeaseHold held_by = LeaseHold::none;
  int64_t wait_ms = 0;  // rate: until the next token
  int64_t key_wake_ms = 0;  // until the first job parked for its key's rate may run; 0: none waits
};

// A queue's limits as lease.lua applies them, with the clock of its rate limit.
struct LeaseLimits {
  int64_t now_ms = 0;
  int64_t concurrency = 0;  // 0 = none
  double rate = 0;          // jobs per second, 0 = none
  int64_t burst = 1;
  int64_t per_key = 0;   // jobs of one key at once, unless the key has its own limit; 0 = none
  bool ordered = false;  // one job of a key at a time, in order; a retry keeps its key's turn
  bool fair = false;     // keys share the leases by weight (lua/lib/fair.lua)
  double key_rate = 0;   // jobs of one key started per second, unless the key has its own; 0 = none
  int64_t key_rate_burst = 1;
  static LeaseLimits of(const QueuePolicy& policy, int64_t now_ms) {
    return {now_ms,         policy.concurrency_limit, policy.rate_limit, policy.rate_burst, policy.key_concurrency,
            policy.ordered, policy.fair,              policy.key_rate,   policy.key_rate_burst};
  }
};

namespace calls {
Command lease(const std::string& queue, int64_t deadline_ms, int count, const LeaseLimits& limits = {});
Result<LeaseBatch> parse_lease(const redisReply* reply);
}  // namespace calls

class Dispatcher {
 public:
  Dispatcher(const BrokerConfig& config, const LeaseClock& lease_clock, QueueTable& queues, WorkerRegistry& workers,
             InflightTable& inflight, Results& results, Outbox& outbox, RefusalBackoff& refusals, Metrics& metrics)
      : config_(config), lease_clock_(lease_clock), queues_(queues), workers_(workers), inflight_(inflight),
        results_(results), outbox_(outbox), refusals_(refusals), metrics_(metrics) {}

  // Adds a lease call for each queue that may have ready jobs and credit
  // (none while Redis refuses writes). Comes after the scheduler's calls, so
  // a lease sees what they moved.
  void add_to(Round& round, bool stopping);
  // Jobs of `queue` its live workers can still take.
  int64_t credit(const std::string& queue) const;
  // Some queue may have ready jobs a worker could take now.
  bool can_lease_now() const;
  // Microseconds until the earliest queue held back by a limit may lease
  // again; -1 when none is.
  int64_t us_until_limit_lifts() const;

  // Leases written by another call: enqueue.lua leases new jobs due now at
  // once where a worker has room (an immediately due job then waits for no
  // lease call). reserve() counts up to `wanted` of the queue's credit
  // against that call and gives it the deadline and tokens to write;
  // deliver() returns the credit once the call's reply is in and sends
  // what it leased (none when the call failed). Two steps by design: the
  // credit must be counted when the call is built (its tokens and deadline
  // are the call's arguments, and a lease call of the next turn must not
  // count the same slots), and only the reply says what Redis leased.
  // Free slots counted against one lease call, per worker: workers serve
  // several queues, and two queues' calls must not count the same slot.
  struct Slots {
    int64_t count = 0;
    std::vector<std::pair<std::string, int64_t>> per_worker;
  };
  struct Reservation {
    Slots slots;  // slots.count: how many jobs the call may lease
    int64_t deadline_ms = 0;
    std::vector<uint64_t> tokens;  // one per job the call may lease
  };
  Reservation reserve(const std::string& queue, int64_t wanted, bool stopping);
  void deliver(const std::string& queue, const Reservation& reservation, std::vector<LeasedJob>&& jobs);

 private:
  void dispatch(QueueState& q, std::vector<LeasedJob>&& jobs, int64_t deadline);
  // The queue's workers with room, less what lease calls still out have
  // counted against them.
  std::vector<FreeSlots> open_slots(const std::string& queue) const;
  // Free slots of each worker, per queue: what a round's lease calls may
  // count against it (broker/loop/slot_allotter.hpp).
  using Allotment = SlotAllotter::Allotment;
  // `rooms[i]`: how many jobs the call for `leasing[i]` may lease.
  Allotment allot(const std::vector<std::string>& leasing, const std::vector<int64_t>& rooms);
  // The reply of a lease call for `queue` that counted `slots` (`count` jobs).
  void on_leased(const std::string& queue, int count, int64_t deadline, const Slots& slots, const redisReply* r);
  // What held the call back, on the queue's state: a pause, or when its
  // limits let it lease again.
  void note_hold(QueueState& q, const LeaseBatch& batch, int count);
  // Takes the jobs past their start-by deadline out of `jobs`, and sends them to the dead letters.
  void expire_late(const std::string& name, std::vector<LeasedJob>& jobs);
  // Sends `frame` to the worker of `slot`, or hands its jobs back when the
  // worker cannot take it.
  void send_frame(QueueState& q, const FreeSlots& slot, proto::Tasks& frame, size_t bytes, int64_t now_ms);
  // A strict worker's queue listed before `queue` may have jobs: `queue`
  // gets none of its slots.
  bool earlier_queue_waits(const WorkerInfo& w, const std::string& queue) const;
  // Up to `wanted` free slots for `queue`: within `allotment` (a lease
  // round's), or, without one (a lease at enqueue), any a strict worker's
  // order allows.
  Slots take_slots(const std::string& queue, int64_t wanted, const Allotment* allotment = nullptr);
  // How many jobs a lease call for `q` may ask for now: 0 while it is paused
  // or waits for its rate limit, at most the room its concurrency limit
  // leaves (what it has in flight and what calls still out may lease).
  int64_t lease_room(const QueueState& q) const;
  static constexpr int64_t kLimitRecheckMs = 100;
  void release(const Slots& slots);

  const BrokerConfig& config_;
  const LeaseClock& lease_clock_;
  QueueTable& queues_;
  WorkerRegistry& workers_;  // the send side of each worker is written here (broker/loop/registry.hpp)
  InflightTable& inflight_;
  Results& results_;  // ends deliveries whose TASKS frame the socket refused
  Outbox& outbox_;
  RefusalBackoff& refusals_;
  Metrics& metrics_;  // lateness of what goes out
  ReservedCounts reserved_;           // slots counted by lease calls not yet applied, per worker
  ReservedCounts reserved_by_queue_;  // jobs lease calls not yet applied may lease, per queue
  SlotAllotter allotter_;
  LogLimiter unreachable_log_{10'000, 20, 10'000};
  uint64_t tasks_frames_sent_ = 0;  // numbers TASKS frames (proto::Tasks::seq)
};

}  // namespace dueq::broker
