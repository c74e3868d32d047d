#pragma once
// Enqueuer: ENQUEUE requests. The jobs of every request gathered since the
// last round are written by enqueue.lua, grouped by queue, and each producer
// is answered once Redis has its jobs (and, with min_replicas, once WAIT saw
// that many replicas take them): accepted means durable. Jobs were
// validated by Inbound before they got here.
//
// Writing a queue's first jobs also registers the queue and pins its
// encoding (pin_encoding.lua), in the same round. Jobs due now may be leased
// by the enqueue call itself (one Redis call from arrival to a worker): the
// Dispatcher reserves the credit when the call is built, since its tokens
// and deadline are the call's arguments, and sends what was leased when the
// reply is applied (Enqueuer::add_to).
#include <algorithm>
#include <memory>
#include <unordered_map>
#include <string>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/loop/dispatcher.hpp"
#include "broker/store/encoding_pin.hpp"
#include "broker/loop/outbox.hpp"
#include "broker/loop/queues.hpp"
#include "broker/loop/registry.hpp"
#include "broker/store/round.hpp"
#include "common/clock.hpp"
#include "common/logging.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

namespace calls {
// The record a new job is stored with.
JobRecord new_job_record(const proto::NewJob& job, int64_t now_ms, uint32_t default_max_attempts);
// enqueue.lua: one status per job: 1 accepted, 0 duplicate, 2 over max_backlog,
// 3 accepted and leased at once. With lease tokens (16 hex digits each) the
// first jobs due now, one per token, may be leased until `lease_deadline_ms`.
// `filter_args`: send each job's schedule filter arguments; without them the
// script works them out itself if anything is scheduled (slower then).
// lua/enqueue.lua's answer for each job (not the wire's EnqueueStatus).
enum class EnqueueReply : int64_t {
  duplicate = 0,
  accepted = 1,
  backlog_full = 2,
  accepted_and_leased = 3,
  unique_held = 4,
  debounced = 5,
};
// One reply per job sent, or an error (a refused call, a reply of another size).
Result<std::vector<EnqueueReply>> parse_enqueue(const redisReply* reply, size_t jobs);
// The ids of the jobs holding the unique keys, one per unique_held or debounced in job
// order (parse_enqueue first checked the reply).
std::vector<std::string> enqueue_holders(const redisReply* reply, size_t jobs);
Command enqueue(const std::string& queue, const std::vector<const proto::NewJob*>& jobs, int64_t now_ms,
                uint32_t default_max_attempts, int64_t max_backlog, int64_t lease_deadline_ms = 0,
                const std::string& lease_tokens = {}, bool filter_args = true, bool fair = false);
// pin_encoding.lua: the encoding pins of a queue's jobs, tokens and leased
// keys (broker/store/encoding_pin.hpp), where they are missing; `pin_bytes` from
// encoding_pin_bytes (broker/store/redis_settings.hpp).
Command pin_encoding(const std::string& queue, size_t pin_bytes);
// register_queue.lua: the queue's name added to the known queues, fenced by
// the leader's epoch counter.
Command register_queue(const std::string& queue);
}  // namespace calls

struct EnqueueRequest {
  Peer producer;
  proto::Enqueue frame;
  std::vector<proto::EnqueueOutcome> outcomes;  // rejected ones already filled in
};

class Enqueuer {
 public:
  Enqueuer(const BrokerConfig& config, const Clock& clock, QueueTable& queues, Outbox& outbox)
      : config_(config), clock_(clock), queues_(queues), outbox_(outbox) {}

  // A producer may have this many requests (or bytes of payload) gathered
  // for one round; more are answered overloaded at once (its first request
  // of a round always gets in, whatever its size), so a peer that pipelines
  // without end costs bounded memory and its share of a round stays small
  // next to other producers'. Above what a producer with 50 requests
  // outstanding sends in one round.
  static constexpr size_t kMaxRequestsPerPeer = 64;
  static constexpr size_t kMaxPayloadBytesPerPeer = 8u << 20;
  // How long a queue found at its max_backlog refuses without asking Redis.
  static constexpr int64_t kBacklogFullMemoMs = 100;

  // The length of the encoding pins new queues get (encoding_pin_bytes,
  // broker/store/redis_settings.hpp), read from Redis at start.
  void use_encoding_pin_bytes(size_t bytes) { encoding_pin_bytes_ = bytes; }
  // Behind a Redis Cluster, where a new queue's registration and its first
  // write go to different slots, the write waits for the registration.
  void use_cluster_registration(bool cluster) { registration_first_ = cluster; }
  // Whether `round` may write `q`'s jobs. A queue not yet in the registry is
  // added to it (register_queue.lua) and its keys pinned to their encoding
  // before its first write. Outside a Redis Cluster both go first in the same
  // round, and a deposed leader's round is fenced whole: true (the caller
  // marks the queue registered once its write is applied). Behind one, a
  // late write of a deposed leader would pass the queue's own fence (a new
  // queue has none), so the write waits until Redis confirmed the
  // registration: false until then, and the registration is added to the
  // round once.
  bool ready_for_writes(Round& round, QueueState& q);

  void on_enqueue(EnqueueRequest&& request);

  // Adds the enqueue calls (and WAIT) of every request gathered; each
  // request is answered when the round is applied. Where the dispatcher
  // has credit and the queue's ready set is believed empty, the call also
  // leases the new jobs due now, and the dispatcher sends them.
  void add_to(Round& round, Dispatcher& dispatcher, bool stopping);
  // Jobs are gathered for the next round, and no more than `limit`.
  bool has_few_jobs_gathered(size_t limit) const {
    size_t jobs = 0;
    for (const auto& request : enqueues_) {
      jobs += request.frame.jobs.size();
      if (jobs > limit) return false;
    }
    return jobs > 0;
  }
  bool has_work() const;
  // Redis is unavailable: everything gathered is answered "unavailable".
  void answer_unavailable(const std::string& why, int64_t retry_after_ms);

 private:
  struct RoundAnswers;
  struct EnqueueCall;
  struct SentCall;
  // The requests gathered whose every queue ready_for_writes allows; the
  // others stay gathered for a later round.
  std::vector<EnqueueRequest> take_writable(Round& round);
  // One enqueue.lua call for `queue`'s jobs in `call` (at most
  // kEnqueueChunk), leasing at once those due now where the dispatcher has
  // room; its continuation fills in each job's outcome.
  void add_call(Round& round, Dispatcher& dispatcher, const std::string& queue, EnqueueCall&& call, int64_t now,
                bool stopping, const std::shared_ptr<RoundAnswers>& answers);
  void on_enqueued(const redisReply* r, Dispatcher& dispatcher, RoundAnswers& answers, SentCall& sent);
  void add_wait(Round& round, const std::shared_ptr<RoundAnswers>& answers);
  // Once the round is applied (or failed): each producer's answer.
  void answer(RoundAnswers& answers, bool applied);
  std::string backlog_reason(const std::string& queue) const;
  // The retry_after_ms of an ENQUEUE_REPLY: set when any job was answered overloaded.
  uint32_t retry_hint(const std::vector<proto::EnqueueOutcome>& outcomes) const;
  // Rejected (bad job, max_queues) or refused for a full backlog already.
  static bool answered_without_redis(const proto::EnqueueOutcome& o) {
    return o.status == proto::EnqueueStatus::rejected || o.status == proto::EnqueueStatus::overloaded;
  }

  const BrokerConfig& config_;
  const Clock& clock_;
  QueueTable& queues_;
  Outbox& outbox_;
  size_t encoding_pin_bytes_ = kEncodingPinBytes;
  bool registration_first_ = false;
  std::vector<EnqueueRequest> enqueues_;
  struct Gathered {
    size_t requests = 0;
    size_t payload_bytes = 0;
  };
  // Per routing id, until a round takes them.
  std::unordered_map<std::string, Gathered> gathered_;
  // Refused enqueues (Redis out of memory) are logged once per 10 s, with
  // the count of those not logged.
  LogLimiter store_error_log_{10'000, 1, 1};
};

}  // namespace dueq::broker
