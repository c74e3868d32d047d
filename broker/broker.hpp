#pragma once
// The coordinator: one event loop that wires the components together. Each
// turn it waits for the earliest of (next due time, next lease deadline, next
// worker expiry, a frame, an admin answer, a signal), lets Inbound route what
// arrived, and sends one pipelined Redis round built by the components:
//
//   Enqueuer         enqueue (+ WAIT)      answers producers
//   Results          ack, nack             confirms to workers
//   LeaseExtensions  extend
//   CronScheduler    cron_tick             periodic jobs, ahead of their ticks
//   Scheduler        promote, reclaim, sweep
//   Dispatcher       lease                 TASKS to workers with credit
//   StatsRequests    stats                 answers STATS
//
// Each call carries its continuation (broker/store/round.hpp). The next round is
// sent before the previous one's replies are applied, so Redis and the
// broker work at the same time (at most two rounds outstanding). Admin work
// runs off the loop (broker/admin/admin.hpp), as does the reconciler.
#include <zmq.hpp>

#include <deque>
#include <span>
#include <memory>
#include <string>

#include "broker/loop/access.hpp"
#include "broker/admin/admin.hpp"
#include "broker/admin/admin_gateway.hpp"
#include "broker/config/config.hpp"
#include "broker/loop/connection_gate.hpp"
#include "broker/loop/connection_monitor.hpp"
#include "broker/loop/cron_scheduler.hpp"
#include "broker/loop/dispatcher.hpp"
#include "broker/loop/enqueuer.hpp"
#include "broker/loop/group_enqueuer.hpp"
#include "broker/inbound.hpp"
#include "broker/loop/inflight.hpp"
#include "broker/loop/leadership.hpp"
#include "broker/loop/lease_extensions.hpp"
#include "broker/loop/metrics.hpp"
#include "broker/loop/outbox.hpp"
#include "broker/loop/queues.hpp"
#include "broker/admin/reconciler.hpp"
#include "broker/loop/results.hpp"
#include "broker/store/round.hpp"
#include "broker/loop/scheduler.hpp"
#include "broker/loop/stall_watch.hpp"
#include "broker/store/redis_client.hpp"
#include "broker/store/sentinel_watch.hpp"
#include "broker/loop/workers.hpp"
#include "common/clock.hpp"

namespace dueq::broker {

// Why Broker::start returned.
enum class StartEnd {
  serving,  // this broker leads and has taken over: Broker::run serves
  stopped,  // SIGTERM/SIGINT while it waited
  deposed,  // it led, but lost the lease or Redis while it took over: main starts a fresh one, which stands by
};

// Why Broker::run returned.
enum class RunEnd {
  stopped,  // SIGTERM/SIGINT: results applied, the lease given up
  deposed,  // another broker leads now: this one wrote nothing more; main starts a fresh one, which stands by
};

class Broker {
 public:
  // `metrics`: what the HTTP server exports (it outlives this broker: a
  // deposed broker's successor goes on with it).
  // `admin_gateway`: how the dashboard reaches this broker's admin thread
  // while it leads.
  Broker(BrokerConfig config, Metrics& metrics, AdminGateway& admin_gateway, const Clock& clock = system_clock());
  ~Broker();

  // Connects to Redis (waiting for it while it is down, unless it refuses
  // the credentials), checks its durability settings, binds the socket,
  // stands by until it leads (broker/loop/leadership.hpp), then takes over.
  Result<StartEnd> start(int signal_fd);
  // Runs until SIGTERM/SIGINT (delivered through `signal_fd`), then stops
  // reading, writes the results it holds to Redis and returns; or until it
  // is deposed.
  Result<RunEnd> run(int signal_fd);

  // The endpoint the main socket is bound to (resolves "tcp://...:0").
  const std::string& bound_endpoint() const { return bound_endpoint_; }

 private:
  // The longest wait between two attempts to reach Redis.
  static constexpr int64_t kMaxReconnectMs = 5'000;
  // Keeps Redis busy: once the oldest round's replies are readable the next
  // turn's rounds are sent first, then the finished round is applied.
  void pump_rounds();
  // One turn: the enqueues in a round of their own, then everything else
  // (results, promotions, leases, stats) in a second round.
  void send_turn();
  // While Redis runs a round: takes in frames until its replies are
  // readable (false), or until enqueues arrived that a free turn can send
  // now (true).
  bool receive_while_redis_works();
  static constexpr size_t kEarlyTurnMaxJobs = 256;
  // The connection broke: no outstanding round is known to have been applied.
  void fail_rounds(const Error& error);
  void reconnect();
  // Start: connects (again and again, until a signal stops it: false), then
  // checks Redis's settings (the encoding pin's length), then listens.
  Result<bool> wait_for_redis(int signal_fd, const RedisAddress& address);
  Result<size_t> check_redis(const RedisAddress& address);
  Result<void> open_socket();
  // The loop's steps (run).
  // Sets the timer to the next wake-up and tells the stall watch; the
  // timeout for zmq::poll (-1: the timer wakes it).
  long arm_timer(int timer_fd);
  // The broker did not listen for `deaf_ms` (StallWatch): its workers'
  // silence meanwhile is excused and its deliveries' leases held long
  // enough for their workers to report them.
  void on_own_stall(int64_t deaf_ms);
  // After a wait: tells the stall watch the loop woke, and acts on a stall.
  void check_own_stall();
  // This thread's CPU time, read by the stall watch when it needs it.
  auto thread_cpu_ms() const {
    return [this] { return clock_.thread_cpu_ms(); };
  }
  void on_signal(int signal_fd);
  void on_master_announced();
  void serve_redis_turn();
  bool stopped_applying() const;
  // Leading, before it serves: the lease clock set, every known queue
  // fenced, brought up to date and its previous leases capped, a thousand
  // queues per round trip with the lease renewed between them, and the
  // cron entries loaded (broker/take_over.cpp).
  Result<void> take_over(size_t pin_bytes);
  Result<void> prepare_queues(std::span<const std::string> names, size_t pin_bytes);
  static constexpr size_t kQueuesPerRoundTrip = 1'000;
  // The lease clock set from Redis's TIME (LeaseClock), at take-over.
  Result<void> set_lease_clock();
  // Until this broker leads: answers every frame "not_leader" and asks for
  // the lease every kStandbyAskMs. False on SIGTERM/SIGINT.
  Result<bool> stand_by(int signal_fd);
  static constexpr int64_t kStandbyAskMs = 100;
  // Deposed, or told so by Redis: nothing more may be sent.
  bool deposed() const { return leadership_.deposed() || redis_.fenced(); }
  // The endpoint standbys name to clients as this broker's.
  std::string advertised_endpoint() const;
  // Microseconds the loop may sleep.
  int64_t us_until_wake() const;

  // Metrics: health every turn; once a second (with an HTTP server) the
  // queues' counters read and a snapshot published.
  void update_metrics();

  BrokerConfig config_;
  Metrics& metrics_;
  AdminGateway& admin_gateway_;
  const Clock& clock_;
  LeaseClock lease_clock_;
  // Two heartbeats: a worker gives a silent broker up after three.
  StallWatch stall_watch_{2 * config_.heartbeat_ms};
  RedisAddress address_;
  RedisClient redis_;
  zmq::context_t context_;
  zmq::socket_t router_;
  ConnectionMonitor connection_monitor_;
  ConnectionGate gate_;
  Access access_;
  std::string bound_endpoint_;
  std::string broker_id_;
  Leadership leadership_;

  Outbox outbox_;
  QueueTable queues_;
  InflightTable inflight_;
  RefusalBackoff refusals_;  // shared by every component that writes
  Waits waits_;
  // The share of Redis's time that admin work and the reconciler take
  // together.
  std::shared_ptr<RedisBudget> background_budget_ = std::make_shared<RedisBudget>(Admin::kRedisShare);
  Results results_;
  LeaseExtensions extensions_;
  Workers workers_;
  Enqueuer enqueuer_;
  GroupEnqueuer group_enqueuer_;
  StatsRequests stats_;
  CronScheduler cron_;
  Scheduler scheduler_;
  Dispatcher dispatcher_;
  Admin admin_;
  QueueRemover queue_remover_;
  Inbound inbound_;
  std::unique_ptr<Reconciler> reconciler_;
  SentinelWatch sentinel_watch_;  // started behind sentinels only

  struct SentRound {
    Round round;
    bool ends_turn = false;  // the last round of its turn
    int64_t sent_us = 0;     // steady clock
  };
  std::deque<SentRound> rounds_;  // sent, oldest first
  int turns_in_flight_ = 0;       // at most two
  int64_t reconnect_at_ms_ = 0;  // steady clock
  int64_t reconnect_backoff_ms_ = 100;
  bool stopping_ = false;
};

}  // namespace dueq::broker
