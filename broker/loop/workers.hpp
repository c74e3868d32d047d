#pragma once
// Worker liveness: HELLO registers a worker (and adopts the deliveries it
// still holds after a reconnect), HEARTBEAT keeps it alive and lists what it
// holds (leases running short are extended: LeaseExtensions), RESULTS are
// screened (only the worker given a delivery reports it) and handed to
// Results, BYE hands back what it has not
// started. A worker silent for worker_timeout is dead: its deliveries go
// back to ready at once. Silence is measured on the steady clock and only up
// to the moment the socket was last read empty, so neither a wall clock
// step nor a slow turn of the loop (frames still unread) kills a live worker.
#include <map>
#include <string>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/loop/inflight.hpp"
#include "broker/loop/lease_extensions.hpp"
#include "broker/loop/metrics.hpp"
#include "broker/loop/outbox.hpp"
#include "broker/loop/queues.hpp"
#include "broker/loop/registry.hpp"
#include "broker/loop/results.hpp"
#include "common/clock.hpp"
#include "common/logging.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

class Workers {
 public:
  Workers(const BrokerConfig& config, const LeaseClock& lease_clock, std::string broker_id, QueueTable& queues,
          InflightTable& inflight, Results& results, LeaseExtensions& extensions, Outbox& outbox)
      : config_(config), lease_clock_(lease_clock), broker_id_(std::move(broker_id)), queues_(queues),
        inflight_(inflight), results_(results), extensions_(extensions), outbox_(outbox) {
    extensions_.on_holder_confirmed([this](const std::string& routing_id) {
      if (WorkerInfo* w = registry_.find(routing_id)) w->confirmed = true;
    });
  }

  void on_hello(const Peer& peer, proto::Hello&& hello, int64_t heard_ms);
  void on_heartbeat(const Peer& peer, const proto::Heartbeat& heartbeat, int64_t heard_ms);
  void on_received(const Peer& peer, const proto::Received& received, int64_t heard_ms);
  void on_bye(const Peer& peer, const proto::Bye& bye, int64_t heard_ms);
  // Buffered jobs a worker that stays cannot start soon: back to ready, no
  // attempt used.
  void on_hand_back(const Peer& peer, const proto::HandBack& hand_back, int64_t heard_ms);
  // A worker is about to start deliveries sent with a start check: their
  // start is recorded (losing them now uses an attempt) and the worker told
  // to go; deliveries it does not hold are dropped.
  void on_starting(const Peer& peer, const proto::Starting& starting, int64_t heard_ms);
  // A running job's progress: kept with the delivery its sender holds (the
  // job's lookup and `dueq workers` show it); any other item is dropped,
  // uncounted (a report crossing the job's result is usual).
  void on_progress(const Peer& peer, proto::Progress&& progress);
  // A RESULTS frame: the items `peer` may report go to Results. It must be
  // a registered worker (else it is told to say HELLO, and resends after),
  // and each delivery must be the one the broker gave it, or one the broker
  // does not know (after a restart: Redis decides by token). Others are
  // stale: confirmed, so that their sender forgets them, counted, never
  // applied.
  void on_results(const Peer& peer, std::vector<proto::JobResult>&& items, int64_t heard_ms);
  // Where a delivery's run time goes when its result arrives (none: not measured).
  void measure_into(Metrics& metrics) { metrics_ = &metrics; }
  // Reports about deliveries the reporting peer does not hold, since start.
  uint64_t stale_reports() const { return stale_reports_; }
  // A delivery's lease ran out (the Scheduler found it). If its worker never
  // confirmed receiving it, that worker gets nothing more until it
  // heartbeats: else a silent peer is sent the same jobs again each time
  // they come back.
  void on_delivery_expired(const InflightJob& job);

  // Declares lost the workers that stopped reading their socket, and dead
  // those silent for worker_timeout as of `all_read_ms`, a steady time
  // before which every frame that reached the broker was read.
  void expire_silent(int64_t all_read_ms);
  // Steady time at which the quietest worker would be declared dead; -1 none.
  int64_t next_expiry_ms() const;

  WorkerRegistry& registry() { return registry_; }

  // ADMIN_REQUEST "workers" (`dueq workers`): a row per registered worker
  // (its id, host, pid, key, queues with weights, capacity, jobs held with
  // their running time, when it was last heard from), answered from this
  // loop's state. Bounded: the first kMaxWorkersListed workers, each with
  // its kMaxJobsListed oldest jobs (and how many more), and one listing
  // per kListIntervalMs (others are answered "overloaded" with when to retry).
  static constexpr size_t kMaxWorkersListed = 1'000;
  static constexpr size_t kMaxJobsListed = 20;
  static constexpr int64_t kListIntervalMs = 100;
  void on_list(const Peer& peer, uint64_t request_id, int64_t heard_ms);

 private:
  uint32_t capped(uint32_t announced) const;
  // Where a worker listed what it holds: a HELLO's list also confirms
  // receipt (its frames may have gone to an earlier broker); a heartbeat's
  // does not, since RECEIVED comes first (§3.3).
  enum class HeldIn { hello, heartbeat };
  void adopt_held(const std::string& routing_id, const std::vector<proto::JobRef>& held, int64_t heard_ms, HeldIn where);
  // A heartbeat lists a delivery of a TASKS frame sent over a delivery
  // timeout ago that neither RECEIVED nor a later frame's RECEIVED
  // confirmed: the worker skips RECEIVED. It is told (ERROR bad_frame,
  // once per frame) and keeps the unconfirmed credit.
  void flag_missing_received(const Peer& peer, const std::vector<proto::JobRef>& held, int64_t heard_ms);
  // False when the broker gave this delivery to another worker, the job is
  // out with another token, or its queue does not exist in Redis.
  bool may_report(const std::string& routing_id, const proto::JobRef& ref);
  void count_stale(const Peer& peer, size_t count, const char* what, int64_t heard_ms);
  // Jobs a worker did not start go back to ready, no attempt used (those it
  // does not hold are counted as stale).
  void return_unstarted(const Peer& peer, const std::vector<proto::JobRef>& refs, const char* reason, int64_t heard_ms);
  void forget(const std::string& routing_id, const char* reason, int64_t now_ms);
  // Any frame from a worker shows it is alive.
  void heard_from(const std::string& routing_id, int64_t heard_ms);

  const BrokerConfig& config_;
  const LeaseClock& lease_clock_;
  std::string broker_id_;
  QueueTable& queues_;
  InflightTable& inflight_;
  Results& results_;               // ends the deliveries of lost workers and those handed back
  LeaseExtensions& extensions_;   // extends the leases of deliveries workers hold
  Outbox& outbox_;
  Metrics* metrics_ = nullptr;
  WorkerRegistry registry_;
  int64_t next_list_ms_ = 0;  // steady: when the next `workers` listing may run
  // A peer saying HELLO over and over is logged once per 10 s.
  LogLimiter join_log_{10'000, 20, 10'000};
  LogLimiter loss_log_{0, 20, 1};
  LogLimiter stale_log_{10'000, 20, 10'000};
  LogLimiter overdue_log_{10'000, 20, 10'000};
  LogLimiter unreceived_log_{10'000, 20, 10'000};
  uint64_t stale_reports_ = 0;
};

}  // namespace dueq::broker
