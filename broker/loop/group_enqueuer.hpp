#pragma once
// GroupEnqueuer: GROUP_ENQUEUE requests (docs/flows.md). Each request is one
// enqueue_group.lua call: a flow (a tree of jobs whose parents wait for
// their children), jobs joining a batch, or both, stored all or nothing.
// The producer is answered once Redis has the jobs (and, with
// min_replicas, once WAIT saw replicas take them). Jobs were validated by
// Inbound, the request's shape by group_problem, before they got here.
#include <optional>
#include <string>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/loop/enqueuer.hpp"
#include "broker/loop/outbox.hpp"
#include "broker/loop/queues.hpp"
#include "broker/store/round.hpp"
#include "common/clock.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

namespace calls {
// lua/enqueue_group.lua's reply codes.
enum class GroupEnqueued : int64_t {
  duplicate = 0,
  accepted = 1,
  backlog_full = 2,
  no_batch = 3,
  batch_closed = 4,
  batch_exists = 5,
  batch_full = 6,
};
struct GroupEnqueueOutcome {
  GroupEnqueued code = GroupEnqueued::accepted;
  int64_t job_number = 0;        // 1-based: the first duplicate
  int64_t released_due_ms = -1;  // closing the batch released its callbacks: their earliest due
};
Command enqueue_group(const proto::GroupEnqueue& request, int64_t now_ms, uint32_t default_max_attempts,
                      int64_t max_backlog, int64_t retention_s,
                      int64_t max_batch_members = proto::GroupEnqueue::kMaxBatchMembers);
Result<GroupEnqueueOutcome> parse_enqueue_group(const redisReply* reply);
}  // namespace calls

// What is wrong with a request's shape (its jobs are checked one by one
// elsewhere): parents before their children, at most kMaxDepth levels, a
// failure policy exactly where there is a parent, callbacks only when a
// batch opens, one of each at most, with neither parent nor children, no
// unique keys, every job in the request's queue. nullopt when nothing is.
struct GroupProblem {
  std::string reason;
  int64_t job_index = -1;  // 0-based, or -1 for the request as a whole
};
std::optional<GroupProblem> group_problem(const proto::GroupEnqueue& request);

class GroupEnqueuer {
 public:
  GroupEnqueuer(const BrokerConfig& config, const Clock& clock, QueueTable& queues, Outbox& outbox, Enqueuer& enqueuer)
      : config_(config), clock_(clock), queues_(queues), outbox_(outbox), enqueuer_(enqueuer) {}

  // Requests gathered for one round, from all producers, and per producer;
  // more are answered overloaded at once.
  // And payload bytes gathered, per producer (its first request of a round
  // always gets in, whatever its size) and in all: a peer that pipelines
  // flows of large payloads without reading costs bounded memory.
  static constexpr size_t kMaxGathered = 256;
  static constexpr size_t kMaxGatheredPerPeer = 16;
  static constexpr size_t kMaxPayloadBytesPerPeer = 8u << 20;
  static constexpr size_t kMaxPayloadBytes = 64u << 20;
  // Jobs of group requests one round writes (a request is never split; the
  // first is taken whatever its size): the producers' requests are taken in
  // turn, one of each before a second of any, so that one that pipelines
  // flows fills no round, and a round's Redis time stays short beside the
  // plain enqueues and results in it.
  static constexpr size_t kMaxJobsPerRound = 1'000;

  // A request whose shape and jobs passed.
  void on_request(const Peer& producer, proto::GroupEnqueue&& request);
  // Requests gathered that a round can take (one waiting for its queue's
  // registration behind a Redis Cluster needs none).
  bool has_work() const;
  // One enqueue_group.lua call per request gathered whose queue may be
  // written (Enqueuer::ready_for_writes); each producer is answered when the
  // round is applied.
  void add_to(Round& round);
  // Redis is unavailable: everything gathered is answered "unavailable".
  void answer_unavailable(const std::string& why, int64_t retry_after_ms);

 private:
  struct Gathered {
    Peer producer;
    proto::GroupEnqueue frame;
    size_t payload_bytes = 0;
  };
  struct Answer {
    Peer producer;
    uint64_t request_id = 0;
    proto::GroupEnqueueReply reply;
    std::string store_error;
  };
  struct RoundAnswers {
    std::vector<Answer> answers;
    bool replicated = true;
  };
  // The requests this round takes (within kMaxJobsPerRound, producers in
  // turn, each writable); the rest stay gathered.
  std::vector<Gathered> take_for_round(Round& round);
  void on_enqueued(const redisReply* r, const Gathered& sent, int64_t now, Answer& answer);
  void answer(RoundAnswers& answers, bool applied);
  void refuse(const Peer& producer, uint64_t request_id, proto::GroupStatus status, std::string reason);

  const BrokerConfig& config_;
  const Clock& clock_;
  QueueTable& queues_;
  Outbox& outbox_;
  Enqueuer& enqueuer_;
  std::vector<Gathered> requests_;
  size_t gathered_bytes_ = 0;  // payload bytes of requests_
};

}  // namespace dueq::broker
