#pragma once
// Lease extensions: a delivery starts with a short deadline (2 s to be
// received) and is extended to lease_ttl while its worker reports holding it
// (HEARTBEAT) or starting it (STARTING, recorded in Redis: losing it now uses
// an attempt). extend.lua is fenced by the delivery's token; a delivery it
// no longer finds current is forgotten here, and its worker's result will
// be stale. Workers decides which deliveries to extend; this applies them.
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/loop/inflight.hpp"
#include "broker/store/refusal_backoff.hpp"
#include "broker/store/round.hpp"
#include "common/clock.hpp"

namespace dueq::broker {

// What a worker said of a delivery whose lease is extended: that it holds
// it, or that its handler is starting (recorded: extend.lua "started").
enum class LeaseReport { held, started };

namespace calls {
Command extend(const std::string& queue, int64_t deadline_ms, LeaseReport report, const std::vector<TokenRef>& items);
// extend.lua's status of one item.
enum class ExtendReply : int64_t { stale = 0, extended = 1 };
// One status per item sent.
Result<std::vector<ExtendReply>> parse_extend(const redisReply* reply, size_t items);
}  // namespace calls

class LeaseExtensions {
 public:
  LeaseExtensions(const BrokerConfig& config, const LeaseClock& lease_clock, InflightTable& inflight,
                  RefusalBackoff& refusals)
      : config_(config), lease_clock_(lease_clock), inflight_(inflight), refusals_(refusals) {}

  void extend(const std::string& queue, TokenRef ref, LeaseReport report) {
    extends_[{queue, report}].push_back(std::move(ref));
  }
  // Adds the extend calls asked for since the last round.
  void add_to(Round& round);
  // Calls to make now (none while Redis refuses writes: RefusalBackoff).
  bool has_work() const { return !refusals_.holding() && !extends_.empty(); }
  // Redis is unavailable: extensions are asked for again by the next heartbeats.
  void drop() { extends_.clear(); }
  // Called with a worker's routing id when Redis extended a delivery adopted
  // from its HELLO (InflightJob::confirms_holder).
  void on_holder_confirmed(std::function<void(const std::string& routing_id)> confirmed) {
    holder_confirmed_ = std::move(confirmed);
  }

 private:
  const BrokerConfig& config_;
  const LeaseClock& lease_clock_;
  InflightTable& inflight_;
  RefusalBackoff& refusals_;
  std::map<std::pair<std::string, LeaseReport>, std::vector<TokenRef>> extends_;
  std::function<void(const std::string&)> holder_confirmed_;
};

}  // namespace dueq::broker
