#pragma once
// Producer gateway: ENQUEUE and STATS requests. Enqueued jobs of every
// request gathered since the last round are written by enqueue.lua, grouped
// by queue, and each producer is answered once Redis has its jobs (and, with
// min_replicas, once WAIT saw that many replicas take them): accepted means
// durable. Jobs were validated by Inbound before they got here.
#include <memory>
#include <string>
#include <vector>

#include "broker/config.hpp"
#include "broker/outbox.hpp"
#include "broker/queues.hpp"
#include "broker/registry.hpp"
#include "broker/round.hpp"
#include "common/clock.hpp"
#include "common/logging.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

namespace calls {
// enqueue.lua: one status per job: 1 accepted, 0 duplicate, 2 over max_backlog.
Command enqueue(const std::string& queue, const std::vector<const proto::NewJob*>& jobs, int64_t now_ms,
                uint32_t default_max_attempts, int64_t max_backlog);
// stats.lua
Command stats(const std::string& queue);
Result<proto::QueueStats> parse_stats(const std::string& queue, const redisReply* reply);
}  // namespace calls

struct EnqueueRequest {
  Peer producer;
  proto::Enqueue frame;
  std::vector<proto::EnqueueOutcome> outcomes;  // rejected ones already filled in
};

class ProducerGateway {
 public:
  ProducerGateway(const BrokerConfig& config, const Clock& clock, QueueTable& queues, Outbox& outbox,
                  const WorkerRegistry& workers)
      : config_(config), clock_(clock), queues_(queues), outbox_(outbox), workers_(workers) {}

  void on_enqueue(EnqueueRequest&& request);
  void on_stats(const Peer& peer, uint64_t request_id) { stats_requests_.emplace_back(peer, request_id); }

  // Adds the enqueue calls (and WAIT) of every request gathered; each
  // request is answered when the round is applied.
  void add_enqueues_to(Round& round);
  // Adds a stats call per queue for the stats requests gathered.
  void add_stats_to(Round& round);
  bool has_work() const { return !enqueues_.empty() || !stats_requests_.empty(); }
  // Redis is unavailable: everything gathered is answered "unavailable".
  void answer_unavailable(const std::string& why, int64_t retry_after_ms);

 private:
  const BrokerConfig& config_;
  const Clock& clock_;
  QueueTable& queues_;
  Outbox& outbox_;
  const WorkerRegistry& workers_;  // counted in stats replies
  std::vector<EnqueueRequest> enqueues_;
  std::vector<std::pair<Peer, uint64_t>> stats_requests_;
  // Refused enqueues (Redis out of memory) are logged once per 10 s, with
  // the count of those not logged.
  LogLimiter store_error_log_{10'000, 1, 1};
};

}  // namespace dueq::broker
