#pragma once
// The leader lease. Brokers may share one store: one leads, the others stand
// by, answer every frame "not_leader" and ask again until the lease lapses
// (Broker::stand_by). The leader renews the lease in its rounds every
// quarter of its length. A renewal that finds another leader deposes the
// broker: Broker::run returns and main starts a fresh one, which stands by.
// Each leader gets a new epoch (lua/lead.lua); every script that writes
// checks it against the queue's and, outside a Redis Cluster, against the
// newest epoch given (lua/lib/fence.lua); behind a Cluster a new leader
// raises every known queue's epoch before it serves (broker/take_over.cpp),
// so a deposed leader that wakes up writes nothing either way. Past a whole lease without an answer from Redis
// (the broker was stopped, stalled or cut off) the leader sends nothing but
// the renewal until Redis answers it. A leader that finds a server that is
// not a master, with no renewal granted for a whole lease, steps down.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/store/round.hpp"
#include "broker/store/redis_client.hpp"
#include "common/clock.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

namespace calls {
Command lead(const std::string& instance, int64_t lease_ms, uint64_t epoch, const std::string& endpoint);
// resign.lua: whether this broker's lease was removed.
Command resign(const std::string& instance, uint64_t epoch);
}  // namespace calls
enum class Resignation : int64_t { not_held = 0, removed = 1 };
namespace calls {
Result<Resignation> parse_resign(const redisReply* reply);
Command fence_queue(const std::string& queue, uint64_t epoch);
}  // namespace calls

class Leadership {
 public:
  Leadership(const BrokerConfig& config, const Clock& clock, std::string instance_id);

  // Standing by: asks once. True when this broker leads now (epoch() is
  // its epoch); false while another one does (leader_endpoint() says where
  // it said it listens), or, with min_replicas, when fewer replicas than
  // that confirmed the new epoch within replica_timeout_ms (the lease is
  // given back: a fail-over to a replica without it would give the same
  // epoch to the next broker, and two leaders would pass every fence).
  Result<bool> try_lead(RedisClient& redis, const std::string& endpoint);
  // Once it leads behind a Redis Cluster, before it serves: these queues'
  // epochs raised, so the calls of the leader before it fail from here on.
  Result<void> fence_queues(RedisClient& redis, std::span<const std::string> queues);

  // Taking over, before the loop runs rounds: renews the lease when it is
  // due, so that preparing a large store outlasts no lease; fails
  // (Errc::fenced) when another broker took it meanwhile.
  Result<void> renew_while_taking_over(RedisClient& redis);
  // Leading: the renewal, when it is due.
  void add_to(Round& round);
  int64_t us_until_renewal() const;
  // No renewal was answered for a whole lease: the next round carries the
  // renewal alone.
  bool unconfirmed() const;
  // The server reached is not a writable master (READONLY, or ROLE at a
  // connect): once no renewal was granted for a whole lease, this broker
  // steps down (deposed() from then on; Broker::run returns and main starts
  // a broker that stands by until it can lead on a master). A store that
  // is merely unreachable, or a master that refuses writes, deposes nobody:
  // no other broker can lead on it either.
  void step_down_if_lapsed(const std::string& why);
  // Another broker took the lease, or this one stepped down: it must write
  // nothing more.
  bool deposed() const { return lost_; }
  // A clean stop: gives the lease up so that a standby takes over at once.
  void resign(RedisClient& redis);

  uint64_t epoch() const { return epoch_; }
  const std::string& leader_endpoint() const { return leader_endpoint_; }

 private:
  // With min_replicas: whether that many replicas have `epoch` (and every
  // write before it), so a fail-over cannot give it to another broker.
  Result<bool> replicas_have(RedisClient& redis, uint64_t epoch);
  Command wait_for_replicas() const;
  bool enough_replicas(const redisReply* acked) const;

  const BrokerConfig& config_;
  const Clock& clock_;
  const std::string instance_;
  std::string endpoint_;         // the one this broker advertises
  std::string leader_endpoint_;  // the leader's, as last seen
  uint64_t epoch_ = 0;
  int64_t answered_at_ms_ = 0;  // steady clock: when the last renewal Redis answered was sent
  int64_t renewed_at_ms_ = 0;   // steady clock: when the last renewal Redis granted was sent
  int64_t next_renewal_ms_ = 0;  // steady clock
  bool renewing_ = false;        // a renewal is in a round not yet applied
  bool lost_ = false;
  LogLimiter refusal_log_{10'000, 1, 1};
};

}  // namespace dueq::broker
