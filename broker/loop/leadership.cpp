#include "broker/loop/leadership.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <algorithm>

#include "broker/store/keys.hpp"

namespace dueq::broker {

namespace calls {

Command lead(const std::string& instance, int64_t lease_ms, uint64_t epoch, const std::string& endpoint) {
  Command call = script_call(lua::ScriptId::lead, {kLeaderHolderKey, kLeaderEpochsKey});
  call.add(instance).add(lease_ms).add(static_cast<int64_t>(epoch)).add(endpoint);
  return call;
}

Command resign(const std::string& instance, uint64_t epoch) {
  Command call = script_call(lua::ScriptId::resign, {kLeaderHolderKey});
  call.add(instance).add(static_cast<int64_t>(epoch));
  return call;
}

Result<Resignation> parse_resign(const redisReply* r) {
  static constexpr std::array kKnown{Resignation::not_held, Resignation::removed};
  if (r == nullptr || r->type != REDIS_REPLY_INTEGER) return reply::bad(r, "resign");
  const auto known = reply::code(r->integer, kKnown);
  if (!known) return reply::bad(r, "resign");
  return *known;
}

Command fence_queue(const std::string& queue, uint64_t epoch) {
  Command call = script_call(lua::ScriptId::fence_queue, {QueueKeys::key(queue, "epoch")});
  call.add(static_cast<int64_t>(epoch));
  return call;
}

}  // namespace calls

namespace {

struct LeaseAnswer {
  uint64_t epoch = 0;  // the caller's, or 0
  uint64_t holder_epoch = 0;
  std::string holder;
  std::string holder_endpoint;
};

Result<LeaseAnswer> parse_lead(const redisReply* r) {
  if (r == nullptr) return fail(Errc::unavailable, "lead: no reply");
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0 || r->element[1]->integer < 0)
    return reply::bad(r, "lead");
  return LeaseAnswer{static_cast<uint64_t>(r->element[0]->integer), static_cast<uint64_t>(r->element[1]->integer),
                     reply::str(r->element[2]), reply::str(r->element[3])};
}

}  // namespace

Leadership::Leadership(const BrokerConfig& config, const Clock& clock, std::string instance_id)
    : config_(config), clock_(clock), instance_(std::move(instance_id)) {}

Result<bool> Leadership::try_lead(RedisClient& redis, const std::string& endpoint) {
  endpoint_ = endpoint;
  const int64_t asked_at = clock_.steady_ms();
  auto reply = redis.call(calls::lead(instance_, config_.leader_lease_ms, 0, endpoint_));
  if (!reply) return std::unexpected(reply.error());
  auto answer = parse_lead(reply->get());
  if (!answer) return std::unexpected(answer.error());
  leader_endpoint_ = answer->holder_endpoint;
  if (answer->epoch == 0) return false;
  auto replicated = replicas_have(redis, answer->epoch);
  if (!replicated || !*replicated) {
    (void)redis.call(calls::resign(instance_, answer->epoch));
    if (!replicated) return std::unexpected(replicated.error());
    return false;
  }
  epoch_ = answer->epoch;
  answered_at_ms_ = renewed_at_ms_ = asked_at;
  next_renewal_ms_ = asked_at + config_.leader_lease_ms / 4;
  spdlog::info("leading with epoch {} (lease {} ms)", epoch_, config_.leader_lease_ms);
  return true;
}

Command Leadership::wait_for_replicas() const {
  return Command{"WAIT", std::to_string(config_.min_replicas), std::to_string(config_.replica_timeout_ms)};
}

bool Leadership::enough_replicas(const redisReply* acked) const {
  return acked != nullptr && acked->type == REDIS_REPLY_INTEGER && acked->integer >= config_.min_replicas;
}

Result<bool> Leadership::replicas_have(RedisClient& redis, uint64_t epoch) {
  if (config_.min_replicas == 0) return true;
  // The renewal is a write on the lease's own key, so WAIT goes where the
  // epoch was given, behind a Redis Cluster too; it covers every write of
  // this connection before it, the counter's INCR among them.
  auto replies = redis.pipeline({calls::lead(instance_, config_.leader_lease_ms, epoch, endpoint_),
                                 wait_for_replicas()});
  if (!replies) return std::unexpected(replies.error());
  auto renewed = parse_lead((*replies)[0].get());
  if (!renewed) return std::unexpected(renewed.error());
  if (renewed->epoch == 0) return false;
  const redisReply* acked = (*replies)[1].get();
  if (enough_replicas(acked)) return true;
  const int64_t now = clock_.steady_ms();
  if (refusal_log_.admit("", now))
    spdlog::warn("not leading with epoch {}: {} of the {} replicas min_replicas asks for have it (WAIT {} ms); "
                 "a fail-over could hand the store to a replica that gives the epoch again",
                 epoch, acked->type == REDIS_REPLY_INTEGER ? acked->integer : -1, config_.min_replicas,
                 config_.replica_timeout_ms);
  return false;
}

Result<void> Leadership::fence_queues(RedisClient& redis, std::span<const std::string> queues) {
  constexpr size_t kPerRoundTrip = 1'000;
  for (size_t i = 0; i < queues.size(); i += kPerRoundTrip) {
    std::vector<Command> raises;
    for (size_t j = i; j < std::min(queues.size(), i + kPerRoundTrip); ++j)
      raises.push_back(calls::fence_queue(queues[j], epoch_));
    // WAIT goes to every master this round trip raised an epoch on: a
    // raise a fail-over loses would let the leader before in again.
    if (config_.min_replicas > 0) raises.push_back(wait_for_replicas());
    auto replies = redis.pipeline(std::move(raises));
    if (!replies) return std::unexpected(replies.error());
    for (const auto& r : *replies)
      if (auto err = reply_error(r.get()); !err.empty()) return fail(Errc::internal, "fence_queue: " + std::string(err));
    if (config_.min_replicas > 0 && !enough_replicas(replies->back().get()))
      return fail(Errc::unavailable, fmt::format("the raised queue epochs reached fewer than the {} replicas min_replicas asks for",
                                                 config_.min_replicas));
  }
  return {};
}

Result<void> Leadership::renew_while_taking_over(RedisClient& redis) {
  const int64_t now = clock_.steady_ms();
  if (now < next_renewal_ms_) return {};
  auto reply = redis.call(calls::lead(instance_, config_.leader_lease_ms, epoch_, endpoint_));
  if (!reply) return std::unexpected(reply.error());
  auto answer = parse_lead(reply->get());
  if (!answer) return std::unexpected(answer.error());
  if (answer->epoch == 0) {
    lost_ = true;
    leader_endpoint_ = answer->holder_endpoint;
    return fail(Errc::fenced, fmt::format("the leader lease of epoch {} went to another broker while this one took over", epoch_));
  }
  answered_at_ms_ = renewed_at_ms_ = now;
  next_renewal_ms_ = now + config_.leader_lease_ms / 4;
  return {};
}

void Leadership::add_to(Round& round) {
  const int64_t now = clock_.steady_ms();
  if (epoch_ == 0 || lost_ || renewing_ || (now < next_renewal_ms_ && !unconfirmed())) return;
  renewing_ = true;
  round.add(calls::lead(instance_, config_.leader_lease_ms, epoch_, endpoint_), [this, now](const redisReply* r) {
    renewing_ = false;
    if (r == nullptr) {
      next_renewal_ms_ = clock_.steady_ms();  // not known to have run: asked again next turn
      return;
    }
    // Any answer shows this broker reached Redis since `now`.
    answered_at_ms_ = now;
    next_renewal_ms_ = now + config_.leader_lease_ms / 4;
    auto answer = parse_lead(r);
    if (!answer) {
      // Refused by a master (out of memory, a failed save, too few
      // replicas): no other broker can lead on this store either, and once
      // writes come back this one takes the lease back unless another
      // asked first (then it is deposed, and the fence kept it from
      // writing meanwhile). A server that is not a master is another
      // matter: step_down_if_lapsed.
      if (refusal_log_.admit("", now))
        spdlog::warn("renewing the leader lease: {}", answer.error().message);
      return;
    }
    if (answer->epoch != 0) {
      renewed_at_ms_ = now;
      return;
    }
    lost_ = true;
    leader_endpoint_ = answer->holder_endpoint;
    spdlog::warn("deposed: the leader lease of epoch {} {}", epoch_,
                 answer->holder.empty() ? std::string("lapsed and another broker led since")
                                        : fmt::format("is held by {} (epoch {})", answer->holder, answer->holder_epoch));
  });
}

int64_t Leadership::us_until_renewal() const {
  if (epoch_ == 0 || lost_ || renewing_) return -1;
  return std::max<int64_t>(0, next_renewal_ms_ - clock_.steady_ms()) * 1000;
}

bool Leadership::unconfirmed() const {
  return epoch_ != 0 && !lost_ && clock_.steady_ms() - answered_at_ms_ >= config_.leader_lease_ms;
}

void Leadership::step_down_if_lapsed(const std::string& why) {
  if (epoch_ == 0 || lost_) return;
  const int64_t since = clock_.steady_ms() - renewed_at_ms_;
  if (since < config_.leader_lease_ms) return;
  lost_ = true;
  leader_endpoint_.clear();
  spdlog::error("stepping down: the leader lease of epoch {} was not renewed for {} ms (a whole lease of {} ms): {}",
                epoch_, since, config_.leader_lease_ms, why);
}

void Leadership::resign(RedisClient& redis) {
  if (epoch_ == 0 || lost_ || !redis.connected()) return;
  auto reply = redis.call(calls::resign(instance_, epoch_));
  if (!reply) return;
  if (auto resigned = calls::parse_resign(reply->get()); resigned && *resigned == Resignation::removed)
    spdlog::info("gave up the leader lease of epoch {}", epoch_);
}

}  // namespace dueq::broker
