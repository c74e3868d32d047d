#include "broker/loop/stats_requests.hpp"

#include <fmt/format.h>

#include <memory>

#include "broker/store/keys.hpp"

namespace dueq::broker {

namespace calls {

Command stats(const std::string& queue) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::stats,
                     {k.schedule, k.ready, k.leased, k.dead, k.stats, k.paused, k.history, k.key_running, k.key_parked,
                      k.fair, k.jobs});
}

Result<proto::QueueStats> parse_stats(const std::string& queue, const redisReply* r) {
  auto v = reply::integers(r, "stats");  // the 22nd, an array, reads as 0
  if (!v || v->size() != 24) return reply::bad(r, "stats");
  const redisReply* top = r->element[21];
  if (top->type != REDIS_REPLY_ARRAY || top->elements % 2 != 0 || top->elements > 2 * kStatsTopKeys) return reply::bad(r, "stats");
  proto::QueueStats s;
  s.queue = queue;
  s.scheduled = (*v)[0];
  s.waiting = (*v)[1];
  s.in_flight = (*v)[2];
  s.dead = (*v)[3];
  s.next_due_ms = (*v)[4] < 0 ? 0 : (*v)[4];
  s.accepted = (*v)[5];
  s.done = (*v)[6];
  s.retried = (*v)[7];
  s.stale_acks = (*v)[8];
  s.cancelled = (*v)[9];
  s.purged = (*v)[10];
  s.died = (*v)[11];
  s.unconfirmed = (*v)[12];
  s.replayed = (*v)[13];
  s.stale_extends = (*v)[14];
  s.oldest_ready_due_ms = std::max<int64_t>(0, (*v)[15]);
  s.paused_since_ms = (*v)[16];
  s.history_kept = (*v)[17];
  s.history_trimmed = (*v)[18];
  s.keys_running = (*v)[19];
  s.waiting_for_key = (*v)[20];
  s.snoozed = (*v)[22];
  s.expired = (*v)[23];
  for (size_t i = 0; i < top->elements; i += 2)
    s.top_keys.push_back({proto::Bytes{reply::str(top->element[i])}, reply::num(top->element[i + 1])});
  return s;
}

}  // namespace calls

void StatsRequests::on_stats(const Peer& peer, uint64_t request_id) {
  if (++gathered_[peer.routing_id] > kMaxRequestsPerPeer) {
    outbox_.send(peer, proto::ErrorFrame{request_id, "unavailable",
                                         fmt::format("more than {} stats requests of this peer wait for one round",
                                                     kMaxRequestsPerPeer),
                                         static_cast<uint32_t>(config_.overload_retry_after_ms)});
    return;
  }
  requests_.emplace_back(peer, request_id);
}

void StatsRequests::add_to(Round& round) {
  if ((requests_.empty() && metrics_ == nullptr) || us_until_next_read() > 0) return;
  next_read_ms_ = clock_.steady_ms() + static_cast<int64_t>(queues_.size()) * kWaitUsPerQueue / 1000;
  auto requests = std::exchange(requests_, {});
  gathered_.clear();
  auto reply = std::make_shared<proto::StatsReply>();
  auto counters = std::make_shared<std::vector<proto::QueueStats>>();
  reply->workers = static_cast<uint32_t>(workers_.size());
  for (const auto& [name, q] : queues_)
    round.add(calls::stats(name), [this, reply, counters, name](const redisReply* r) {
      if (r == nullptr) return;
      if (auto s = calls::parse_stats(name, r)) {
        const QueuePolicy& policy = config_.policy(name);
        s->rate_limit = policy.rate_limit;
        s->rate_burst = policy.rate_limit > 0 ? policy.rate_burst : 0;
        s->concurrency_limit = policy.concurrency_limit;
        reply->queues.push_back(*s);
        counters->push_back(std::move(*s));
      }
    });
  round.then([this, reply, counters, metrics = std::exchange(metrics_, nullptr), requests = std::move(requests)](bool applied) {
    if (applied && metrics != nullptr) metrics->counters_read(std::move(*counters), clock_.wall_ms());
    for (const auto& [peer, request_id] : requests) {
      if (!applied) {
        outbox_.send(peer, proto::ErrorFrame{request_id, "unavailable", "Redis connection lost; retry",
                                             static_cast<uint32_t>(config_.overload_retry_after_ms)});
        continue;
      }
      reply->request_id = request_id;
      outbox_.send(peer, *reply);
    }
  });
}

void StatsRequests::answer_unavailable(const std::string& why, int64_t retry_after_ms) {
  gathered_.clear();
  for (const auto& [peer, request_id] : std::exchange(requests_, {}))
    outbox_.send(peer, proto::ErrorFrame{request_id, "unavailable", why + "; the broker is not ready",
                                         static_cast<uint32_t>(retry_after_ms)});
}

}  // namespace dueq::broker
