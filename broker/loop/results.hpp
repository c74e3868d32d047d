#pragma once
// Results: how deliveries end, applied in Redis. RESULTS from workers become
// ack (done) and nack (retry with backoff, dead, cancelled) calls. A
// delivery whose worker cannot report (lost, or never reached by its TASKS
// frame) or hands it back unstarted ends here too, reported by the broker
// for it: a requeue, nack "now"/"lost"/"shared"/"return", back to ready.
// Every call is fenced by the delivery's token in Redis. A result stays here
// until Redis applied it, and the worker is sent CONFIRM only then.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/loop/inflight.hpp"
#include "broker/loop/outbox.hpp"
#include "broker/loop/queues.hpp"
#include "broker/loop/waits.hpp"
#include "broker/store/refusal_backoff.hpp"
#include "broker/store/round.hpp"
#include "common/clock.hpp"
#include "common/logging.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

enum class NackMode {
  retry,        // back to the schedule after backoff
  now,          // back to ready at once, counted as an attempt (worker lost while running it)
  lost,         // back to ready at once, counted only if Redis holds its start (lua/lib/lost_delivery.lua)
  lost_beside,  // as lost, but its worker held other jobs beside it: a start Redis holds is not counted either
  shared,       // back to ready at once, not counted: its worker died running several announced jobs
  dead,         // straight to the dead-letter set
  handed_back,  // back to ready at once, not counted (never started)
  cancel,       // ends cancelled
  snooze,       // its handler asked to run again after NackItem::snooze_ms: no attempt used
  expired,      // not started by its start-by deadline: dead, no attempt used
};

// The reason an expired job dies with: "expired: not started by <ISO time>".
std::string expired_reason(int64_t start_by_ms);

struct NackItem {
  std::string id;
  uint64_t token = 0;
  NackMode mode = NackMode::retry;
  std::string reason;
  double jitter = 0;  // [0, 1]
  std::string worker;  // the worker that held it, for the job's error log ("" when none is known)
  int64_t started_ms = 0;  // when its delivery started, for its history entry (0: unknown)
  int64_t snooze_ms = 0;   // NackMode::snooze: due again this long after now
};

// One job that ended done: its delivery, and what its history entry keeps
// (lua/lib/history.lua) when its queue keeps history.
struct AckItem {
  std::string id;
  uint64_t token = 0;
  int64_t started_ms = 0;  // when its delivery started (0: unknown)
  std::string worker;      // the worker that ran it
  std::string result;      // what its handler returned ("" for none)
};

// lua/nack.lua's status of one job.
enum class NackStatus : int64_t { stale = 0, retried = 1, dead = 2, cancelled = 3 };
enum class AckStatus : int64_t { stale = 0, applied = 1 };
struct NackOutcome {
  NackStatus status = NackStatus::stale;
  int64_t due_ms = 0;  // retried: when it is due again
};

namespace calls {
// ack.lua: one status per item, 1 applied, 0 stale. With `keep_history`
// each job's document goes to the queue's history hash (retention_s > 0).
Command ack(const std::string& queue, int64_t now_ms, int64_t retention_s, const std::vector<AckItem>& items,
            bool keep_history = false);
// nack.lua; with `keep_history` a job that ends cancelled keeps its
// document in the queue's history hash (retention_s > 0). A job snoozed
// more than `max_snoozes` times goes dead (0: no limit).
Command nack(const std::string& queue, int64_t now_ms, int64_t base_ms, int64_t cap_ms, int64_t retention_s,
             const std::vector<NackItem>& items, bool keep_history = false, uint32_t max_snoozes = 0);
Result<std::vector<NackOutcome>> parse_nack(const redisReply* reply);
Result<std::vector<AckStatus>> parse_ack(const redisReply* reply);
// The last value of an ack or nack reply: the earliest due ms of a job held
// for its group (a flow parent, a batch callback) that these results
// released (lua/lib/group.lua), or -1.
int64_t released_due(const redisReply* reply);
}  // namespace calls

class Results {
 public:
  Results(const BrokerConfig& config, const Clock& clock, QueueTable& queues, InflightTable& inflight, Outbox& outbox,
          RefusalBackoff& refusals, Waits& waits)
      : config_(config), clock_(clock), queues_(queues), inflight_(inflight), outbox_(outbox), refusals_(refusals), waits_(waits) {}

  void on_results(const Peer& worker, std::vector<proto::JobResult>&& items);
  // Back to ready: a lost worker's job (NackMode::now) or one handed back
  // unstarted (NackMode::handed_back).
  void requeue(const std::string& queue, NackItem item) { requeues_[queue].push_back(std::move(item)); }

  // Adds the round's ack, nack and requeue calls.
  void add_to(Round& round);
  // Calls to make now (none while Redis refuses writes, nor for a queue
  // whose slot is moving: RefusalBackoff).
  bool has_work() const;
  size_t unapplied() const { return pending_.size(); }

 private:
  struct Pending {
    Peer worker;
    proto::JobResult result;
    int64_t started_ms = 0;  // when its delivery started (lease clock; 0: unknown)
  };
  void add_result_call(Round& round, const std::string& queue, bool ack, std::vector<Pending>&& batch);
  void add_requeue_calls(Round& round);
  void note_nack_outcomes(const std::string& queue, int64_t now, const redisReply* r);
  void tell_waits(const std::string& queue, int64_t now, const std::vector<Pending>& batch, const redisReply* r);

  const BrokerConfig& config_;
  const Clock& clock_;
  QueueTable& queues_;
  InflightTable& inflight_;
  Outbox& outbox_;
  std::mt19937_64 rng_{std::random_device{}()};
  RefusalBackoff& refusals_;
  Waits& waits_;  // told of each ack applied, and of queues whose jobs a nack may have ended
  std::vector<Pending> pending_;  // kept until Redis applied them
  std::map<std::string, std::vector<NackItem>> requeues_;
};

}  // namespace dueq::broker
