#pragma once
// Results: what workers report about their deliveries, applied in Redis.
// RESULTS become ack (done) and nack (retry with backoff, dead, cancelled)
// calls; jobs of lost workers and jobs handed back go back to ready (nack
// "now" / "return"); jobs a worker reports holding get their lease extended.
// Every call is fenced by the delivery's token in Redis. A result stays here
// until Redis applied it, and the worker is sent CONFIRM only then.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "broker/config.hpp"
#include "broker/inflight.hpp"
#include "broker/outbox.hpp"
#include "broker/queues.hpp"
#include "broker/round.hpp"
#include "common/clock.hpp"
#include "common/logging.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

struct TokenRef {
  std::string id;
  uint64_t token = 0;
};

enum class NackMode {
  retry,        // back to the schedule after backoff
  now,          // back to ready at once, counted as an attempt (worker lost after confirming receipt)
  lost,         // back to ready at once, counted only if Redis saw its receipt (lua/lib/lost_delivery.lua)
  dead,         // straight to the dead-letter set
  handed_back,  // back to ready at once, not counted (never started)
  cancel,       // ends cancelled
};

struct NackItem {
  std::string id;
  uint64_t token = 0;
  NackMode mode = NackMode::retry;
  std::string reason;
  double jitter = 0;  // [0, 1]
};

struct NackOutcome {
  int status = 0;  // 0 stale, 1 retried, 2 dead, 3 cancelled
  int64_t due_ms = 0;
};

namespace calls {
// ack.lua: one status per item, 1 applied, 0 stale.
Command ack(const std::string& queue, int64_t now_ms, int64_t retention_s, const std::vector<TokenRef>& items);
// nack.lua
Command nack(const std::string& queue, int64_t now_ms, int64_t base_ms, int64_t cap_ms, int64_t retention_s,
             int unconfirmed_limit, const std::vector<NackItem>& items);
Result<std::vector<NackOutcome>> parse_nack(const redisReply* reply);
// extend.lua: one status per item, 1 extended, 0 stale.
Command extend(const std::string& queue, int64_t deadline_ms, const std::vector<TokenRef>& items);
}  // namespace calls

class Results {
 public:
  Results(const BrokerConfig& config, const Clock& clock, const LeaseClock& lease_clock, QueueTable& queues,
          InflightTable& inflight, Outbox& outbox)
      : config_(config), clock_(clock), lease_clock_(lease_clock), queues_(queues), inflight_(inflight), outbox_(outbox) {}

  void on_results(const Peer& worker, std::vector<proto::JobResult>&& items);
  // Back to ready: a lost worker's job (NackMode::now) or one handed back
  // unstarted (NackMode::handed_back).
  void requeue(const std::string& queue, NackItem item) { requeues_[queue].push_back(std::move(item)); }
  void extend(const std::string& queue, TokenRef ref) { extends_[queue].push_back(std::move(ref)); }

  // Adds the round's ack, nack, requeue and extend calls.
  void add_to(Round& round);
  bool has_work() const {
    return (!pending_.empty() && clock_.steady_ms() >= retry_at_ms_) || !requeues_.empty() || !extends_.empty();
  }
  // Microseconds until results Redis refused are tried again; -1 if none wait.
  int64_t us_until_retry() const {
    if (pending_.empty() || retry_backoff_ms_ == 0) return -1;
    return std::max<int64_t>(0, (retry_at_ms_ - clock_.steady_ms()) * 1000);
  }
  size_t unapplied() const { return pending_.size(); }
  // The last result call came back refused (Redis out of memory, ...).
  bool refused() const { return retry_backoff_ms_ > 0; }
  // Redis is unavailable: extensions are asked for again by the next heartbeats.
  void drop_extends() { extends_.clear(); }

 private:
  struct Pending {
    Peer worker;
    proto::JobResult result;
  };
  void add_result_call(Round& round, const std::string& queue, bool ack, std::vector<Pending>&& batch);
  void add_requeue_calls(Round& round);
  void add_extend_calls(Round& round);

  const BrokerConfig& config_;
  const Clock& clock_;
  const LeaseClock& lease_clock_;
  QueueTable& queues_;
  InflightTable& inflight_;
  Outbox& outbox_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::vector<Pending> pending_;  // kept until Redis applied them
  // Results Redis refused are tried again after a backoff (100 ms doubling
  // to 5 s), not every turn: a refusal costs Redis and the loop as much as
  // an ack.
  int64_t retry_backoff_ms_ = 0;
  int64_t retry_at_ms_ = 0;
  LogLimiter refusal_log_{10'000, 1, 1};
  std::map<std::string, std::vector<NackItem>> requeues_;
  std::map<std::string, std::vector<TokenRef>> extends_;
};

}  // namespace dueq::broker
