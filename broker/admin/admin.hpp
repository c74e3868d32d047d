#pragma once
// Admin: runs operator commands (broker/admin/admin_commands.hpp: cancel,
// dead_list, replay, purge, audit) and job lookups (JOB,
// broker/admin/job_lookup.hpp). They can touch every job of every queue, so they
// run on a thread of their own with their own Redis connection, in bounded
// steps paced to a share of Redis's time: the event loop keeps serving workers
// and producers while an audit of a million jobs runs. Each request is
// answered when it is done; a resend of a request still in progress is
// ignored, and at most kMaxQueued wait (more are answered "overloaded").
// The loop delivers the answers and applies their effects on its state
// (tell the worker running a cancelled job to stop; replayed queues may have
// ready jobs).
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/background_thread.hpp"
#include "broker/config/config.hpp"
#include "broker/loop/cron_scheduler.hpp"
#include "broker/loop/inflight.hpp"
#include "broker/loop/outbox.hpp"
#include "broker/loop/queues.hpp"
#include "broker/loop/waits.hpp"
#include "broker/store/background_share.hpp"
#include "broker/store/round.hpp"
#include "broker/store/redis_client.hpp"
#include "common/clock.hpp"
#include "common/logging.hpp"
#include "common/protocol.hpp"
#include "common/unique_fd.hpp"

namespace dueq::broker {

class Admin {
 public:
  // Share of Redis's time admin work and the reconciler take together:
  // half while the event loop sends at most 10 commands in 100 ms (an idle
  // broker sends about one), less in inverse proportion as it sends more (a
  // fifth at 25), a twentieth from 100 on (the loop batches: about 170 at
  // 20,000 jobs a second).
  static constexpr BackgroundShare::Settings kRedisShare{
      .quiet = 0.5, .floor = 0.05, .quiet_commands = 10, .window = std::chrono::milliseconds(100)};
  static constexpr size_t kMaxQueued = 64;
  // Of those, at most this many from one requester (one key with CURVE, one
  // connection without): a producer's flood of lookups leaves room for the
  // operator's own requests.
  static constexpr size_t kMaxQueuedPerRequester = 16;

  // `budget`: the share of Redis's time admin work takes, together with the
  // other holders of the same budget (the reconciler).
  Admin(const BrokerConfig& config, const Clock& clock, RedisAddress address, std::shared_ptr<RedisBudget> budget);
  ~Admin() { stop(); }

  // `epoch`: the leader's, which its writes are fenced with.
  void start(uint64_t epoch) {
    redis_.set_epoch(epoch);
    thread_.start([this] { run(); });
  }
  void stop() { thread_.stop(); }

  using Request = std::variant<proto::JobRequest, proto::AdminRequest>;
  using AnswerFrame = std::variant<proto::JobReply, proto::AdminReply, proto::ErrorFrame>;
  // Runs on the event loop with the answer, after its effects are applied.
  using LocalDone = std::function<void(AnswerFrame)>;
  // At most this many requests of the HTTP server wait at once.
  static constexpr size_t kMaxLocal = 4;

  // Event loop: queue a request.
  void submit(const Peer& peer, proto::JobRequest&& request);
  void submit(const Peer& peer, proto::AdminRequest&& request);
  // Any thread (the dashboard's): queue a request answered through `done`;
  // false when kMaxLocal wait already or kMaxQueued in all.
  bool submit_local(Request request, LocalDone done);
  // Event loop: its own connection to Redis was opened anew (a restart, a
  // fail-over, a move): the admin thread leaves its connection before its
  // next request too, so that it reads the server the loop writes to and
  // not one the loop has left (which may still say it is a master).
  void store_reconnected() { loop_connects_.fetch_add(1, std::memory_order_relaxed); }
  // Event loop: readable when answers are ready.
  int ready_fd() const { return ready_fd_.get(); }
  // Event loop: sends the ready answers and applies their effects.
  void deliver(Outbox& outbox, InflightTable& inflight, QueueTable& queues, CronScheduler& cron, Waits& waits);

 private:
  struct Answer {
    Peer peer;
    uint64_t request_id = 0;
    AnswerFrame frame;
    LocalDone local;  // a local request's: called instead of sending the frame
    std::vector<proto::JobRef> stop_running;  // cancelled while running: tell its worker
    std::vector<std::string> ready_queues;    // replayed into ready, or a cancel that may have freed a key's turn
    std::map<std::string, int64_t> earliest_due;  // rescheduled: a queue's earliest new due ms
    std::vector<std::string> paused_queues;
    std::vector<std::string> resumed_queues;
    std::vector<CronEntry> cron_put;
    std::vector<std::string> cron_removed;
    bool silent = false;  // work of the admin thread's own (a bulk page): nothing to send
  };

  void submit(const Peer& peer, uint64_t request_id, Request&& request);
  // Wakes the event loop: answers are ready.
  void signal_ready();
  void run();
  Answer handle(const Peer& peer, const Request& request);
  Answer handle_guarded(const Peer& peer, const Request& request);
  void bulk_step();
  bool apply_configured_keys();
  Result<void> open_connection();

  const BrokerConfig& config_;
  const Clock& clock_;
  RedisClient redis_;  // the admin thread's own connection
  UniqueFd ready_fd_;
  BackgroundThread thread_;  // its mutex guards requests_ and answers_
  struct Queued {
    Peer peer;
    Request request;
    LocalDone local;
  };
  std::deque<Queued> requests_;
  std::vector<Answer> answers_;
  size_t local_waiting_ = 0;  // guarded by thread_.mutex()
  LogLimiter failure_log_{10'000, 1, 1};  // admin thread only
  int64_t next_bulk_ms_ = 0;              // admin thread only: steady ms of the next bulk page
  bool bulk_may_run_ = true;              // admin thread only: a bulk action may be running
  bool keys_applied_ = false;             // admin thread only: the configured keys' settings are in Redis
  bool keys_tried_ = false;               // admin thread only: and they were tried once
  std::atomic<uint64_t> loop_connects_{0};  // store_reconnected() calls
  uint64_t connects_seen_ = 0;              // admin thread only: loop_connects_ when its connection was opened

  std::set<std::pair<std::string, uint64_t>> in_progress_;  // event loop only: (routing id, request id)
  std::map<std::string, size_t> waiting_by_requester_;      // event loop only: requests not yet answered
  static std::string requester(const Peer& peer) { return peer.key_name.empty() ? "peer " + peer.routing_id : "key " + peer.key_name; }
};

}  // namespace dueq::broker
