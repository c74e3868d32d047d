#pragma once
// STATS requests: the counts of every queue (stats.lua, one call per queue)
// and the number of registered workers. Requests gathered between two reads
// share one read; so does the metrics' read once a second (broker/loop/metrics.hpp).
#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/loop/metrics.hpp"
#include "broker/loop/outbox.hpp"
#include "broker/loop/queues.hpp"
#include "broker/loop/registry.hpp"
#include "broker/store/round.hpp"
#include "common/clock.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

// The keys with the most jobs waiting for a turn that stats.lua names per
// queue (its top_keys).
inline constexpr size_t kStatsTopKeys = 10;

namespace calls {
// stats.lua
Command stats(const std::string& queue);
Result<proto::QueueStats> parse_stats(const std::string& queue, const redisReply* reply);
}  // namespace calls

class StatsRequests {
 public:
  StatsRequests(const BrokerConfig& config, const Clock& clock, const QueueTable& queues, Outbox& outbox,
                const WorkerRegistry& workers)
      : config_(config), clock_(clock), queues_(queues), outbox_(outbox), workers_(workers) {}

  // A peer may have this many requests waiting for a read; more are
  // answered "unavailable" at once.
  static constexpr size_t kMaxRequestsPerPeer = 16;
  // Stats cost a call per queue: after a read the next waits 50 us per
  // queue (nothing with a few queues, 50 ms with 1,000), so a peer asking
  // without end takes a bounded share of Redis; requests in between wait for
  // the next read.
  static constexpr int64_t kWaitUsPerQueue = 50;

  void on_stats(const Peer& peer, uint64_t request_id);
  // The metrics' read: `metrics` gets the counters with the next read.
  void for_metrics(Metrics& metrics) { metrics_ = &metrics; }
  // Adds a stats call per queue when requests wait and the next read is due;
  // they are answered when the round is applied.
  void add_to(Round& round);
  // Microseconds until the next read, or -1 when no request waits.
  int64_t us_until_next_read() const {
    if (requests_.empty() && metrics_ == nullptr) return -1;
    return std::max<int64_t>(0, (next_read_ms_ - clock_.steady_ms()) * 1000);
  }
  // Redis is unavailable: the requests waiting are answered "unavailable".
  void answer_unavailable(const std::string& why, int64_t retry_after_ms);

 private:
  const BrokerConfig& config_;
  const Clock& clock_;
  const QueueTable& queues_;
  Outbox& outbox_;
  const WorkerRegistry& workers_;  // counted in the replies
  std::vector<std::pair<Peer, uint64_t>> requests_;
  Metrics* metrics_ = nullptr;  // waits for the next read
  std::unordered_map<std::string, size_t> gathered_;  // requests waiting per routing id
  int64_t next_read_ms_ = 0;                          // steady clock
};

}  // namespace dueq::broker
