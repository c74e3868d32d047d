#pragma once
// The coordinator: one thread, one event loop. Each turn it waits for the
// earliest of (next due time, next lease deadline, next worker expiry, an
// incoming frame), reads what arrived, and applies everything to Redis in one
// pipelined round: enqueues, results, lease extensions, promotion of due
// jobs, reclaim of expired leases and leases for free worker capacity. The
// next round is sent before the previous one's reply is applied, so Redis
// and the broker work at the same time (at most two rounds outstanding).
// Tasks go to the chosen worker over the same ROUTER socket, so credit is
// exact per worker and a hung or dead worker is never sent new work.
#include <zmq.hpp>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker/config.hpp"
#include "broker/inflight.hpp"
#include "broker/reconciler.hpp"
#include "broker/registry.hpp"
#include "broker/store.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

class Broker {
 public:
  explicit Broker(BrokerConfig config);
  ~Broker();

  // Connects to Redis (waiting for it while it is down), checks its
  // durability settings, binds the sockets and reads known queues.
  Result<void> start();
  // Runs until SIGTERM/SIGINT (delivered through `signal_fd`), then stops
  // reading, writes the results it holds to Redis and returns.
  Result<void> run(int signal_fd);

  // The endpoint the main socket is bound to (resolves "tcp://...:0").
  const std::string& bound_endpoint() const { return bound_endpoint_; }

 private:
  struct Peer {
    std::string routing_id;
    bool req_envelope = false;  // REQ peers put an empty frame before the body
  };

  struct Queue {
    std::string name;
    int64_t next_due_ms = -1;      // earliest scheduled due time known, -1 none
    int64_t next_deadline_ms = -1; // earliest lease deadline known, -1 none
    bool maybe_ready = false;      // the ready list may hold jobs
    bool registered = false;       // name written to the queue registry
    size_t rotation = 0;           // spreads single jobs over the workers in turn
    int64_t next_sweep_ms = 0;     // when done/cancelled entries past retention are next removed
  };

  struct PendingResult {
    Peer worker;
    proto::JobResult result;
  };

  struct EnqueueRequest {
    Peer producer;
    proto::Enqueue frame;
    std::vector<proto::EnqueueOutcome> outcomes;
  };

  // A round sent to Redis and not yet applied: the requests it answers and
  // where each one's reply is.
  struct SentRound {
    struct EnqueueSlot { size_t request; size_t position; };
    struct EnqueueCall { size_t reply; std::string queue; std::vector<EnqueueSlot> slots; std::vector<const proto::NewJob*> jobs; };
    struct ResultCall { size_t reply; std::string queue; bool ack; std::vector<size_t> results; };
    struct ExtendCall { size_t reply; std::string queue; std::vector<TokenRef> items; };
    struct QueueCalls { std::string queue; std::optional<size_t> promote, reclaim, lease, sweep; int lease_count = 0; };

    int64_t now = 0;
    int64_t lease_deadline = 0;
    int64_t extended_deadline = 0;
    std::vector<EnqueueRequest> enqueues;
    std::vector<EnqueueCall> enqueue_calls;  // jobs point into `enqueues`
    std::optional<size_t> wait_reply;
    std::vector<PendingResult> results;
    std::vector<ResultCall> result_calls;   // indices into `results`
    std::vector<std::pair<size_t, std::string>> requeue_calls;
    std::vector<ExtendCall> extend_calls;
    std::vector<QueueCalls> queue_calls;
    std::vector<std::pair<Peer, uint64_t>> stats_requests;
    std::vector<size_t> stats_replies;      // one per queue, only when someone asked
    std::vector<std::string> stats_queues;
  };

  // Frame handlers: decode has happened; they record work for the round.
  void on_frame(const Peer& peer, proto::Frame&& frame, int64_t now);
  // Reads and handles up to max_frames_per_turn frames without blocking.
  void receive_frames(int64_t now);
  // Runs while Redis executes a round: takes in frames until the reply is
  // readable, so the broker's frame work overlaps Redis's script work.
  void receive_frames_until_readable(int redis_fd);
  void on_hello(const Peer& peer, proto::Hello&& hello, int64_t now);
  void on_heartbeat(const Peer& peer, const proto::Heartbeat& heartbeat, int64_t now);
  void on_results(const Peer& peer, proto::Results&& results);
  void on_bye(const Peer& peer, const proto::Bye& bye, int64_t now);
  void on_enqueue(const Peer& peer, proto::Enqueue&& enqueue, int64_t now);
  void on_job_request(const Peer& peer, const proto::JobRequest& request);
  void on_admin(const Peer& peer, const proto::AdminRequest& request, int64_t now);
  Result<proto::AdminReply> run_admin(const proto::AdminRequest& request, int64_t now);
  // Queues to search for a job: the given one, or every known queue.
  std::vector<std::string> queues_for(const std::string& queue) const;
  Result<std::string> find_job_queue(const std::string& id, const std::string& queue);
  void on_bad_frame(const Peer& peer, const Error& error, int64_t now);

  void adopt_held(const std::string& routing_id, const std::vector<proto::JobRef>& held, int64_t now);
  void expire_silent_workers(int64_t now);
  void forget_worker(const std::string& routing_id, const char* reason, int64_t now);

  // Pipelined Redis rounds for everything gathered from frames: pump_rounds
  // sends, waits for and applies them; build_round fills `round` and
  // returns nothing when there is nothing to do.
  void pump_rounds(int64_t now);
  void send_round(int64_t now);
  std::optional<SentRound> build_round(int64_t now, Round& round);
  void apply_round(SentRound& sent, std::vector<ReplyPtr>& rs);
  void fail_rounds(const Error& error);
  void dispatch(Queue& queue, std::vector<LeasedJob>&& jobs, int64_t deadline);
  // Leases requested by outstanding rounds: credit they may still use.
  int64_t reserved_leases(const std::string& queue) const;
  void answer_enqueues_unavailable(const std::string& why);
  void reconnect(int64_t now);
  int64_t next_wake(int64_t now) const;

  Queue& queue(const std::string& name);
  bool has_work_now() const;
  // Jobs of `queue` its live workers can still take.
  int64_t credit(const std::string& queue) const;

  template <typename T>
  void send(const Peer& peer, const T& frame);

  BrokerConfig config_;
  Store store_;
  zmq::context_t context_;
  zmq::socket_t router_;
  std::string bound_endpoint_;
  std::string broker_id_;
  std::map<std::string, Queue> queues_;
  WorkerRegistry workers_;
  InflightTable inflight_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::unique_ptr<Reconciler> reconciler_;

  // Work gathered from frames, applied by the next round.
  std::vector<EnqueueRequest> enqueues_;
  std::vector<PendingResult> results_;              // kept until Redis applied them
  std::map<std::string, std::vector<TokenRef>> extends_;
  std::map<std::string, std::vector<NackItem>> requeues_;  // jobs of lost workers
  std::vector<std::pair<Peer, uint64_t>> stats_requests_;
  std::deque<SentRound> rounds_;  // sent, oldest first (at most two)
  // While rounds are outstanding the Redis connection is busy: requests that
  // read Redis directly (JOB, ADMIN) wait here until none is.
  std::vector<std::pair<Peer, proto::Frame>> deferred_requests_;

  int64_t reconnect_at_ms_ = 0;
  int64_t reconnect_backoff_ms_ = 100;
  std::unordered_map<std::string, int64_t> bad_frame_logged_at_;
  uint64_t frames_rejected_ = 0;
  bool stopping_ = false;
};

}  // namespace dueq::broker
