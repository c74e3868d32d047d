#include "broker/loop/results.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"
#include "common/job_document.hpp"

namespace dueq::broker {

namespace {
constexpr size_t kResultChunk = 5000;     // ack/nack take at most 5000
constexpr size_t kRequeuePerRound = 500;  // lost workers' jobs returned per queue per round
}  // namespace

std::string expired_reason(int64_t start_by_ms) { return "expired: not started by " + iso_time(start_by_ms); }

namespace calls {

Command ack(const std::string& queue, int64_t now_ms, int64_t retention_s, const std::vector<AckItem>& items,
            bool keep_history) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::ack, {k.leased, k.stats, k.jobs, k.tokens, k.attempts, k.errors,
                                                  k.error_logs, k.cancel_requested, k.done, k.started, k.unconfirmed,
                                                  k.history, k.key_held, k.key_running, k.key_parked, k.ready,
                                                  k.unique, k.snoozes, k.results, k.groups, k.schedule, k.dead,
                                                  k.cancelled, k.fair});
  call.add(now_ms).add(retention_s).add(keep_history ? "1" : "0").add(static_cast<int64_t>(items.size()));
  for (const auto& item : items) {
    call.add(item.id).add(token_text(item.token)).add(item.result);
    if (keep_history) call.add(item.started_ms > 0 ? std::to_string(item.started_ms) : std::string()).add(item.worker);
  }
  return call;
}

Command nack(const std::string& queue, int64_t now_ms, int64_t base_ms, int64_t cap_ms, int64_t retention_s,
             const std::vector<NackItem>& items, bool keep_history, uint32_t max_snoozes) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::nack, {k.schedule, k.ready, k.leased, k.dead, k.stats, k.jobs, k.tokens,
                                                   k.attempts, k.errors, k.error_logs, k.cancel_requested, k.cancelled,
                                                   k.started, k.unconfirmed, k.history, k.key_held, k.key_running,
                                                   k.key_parked, k.unique, k.snoozes, k.groups, k.fair});
  call.add(now_ms).add(base_ms).add(cap_ms).add(retention_s);
  call.add(static_cast<int64_t>(items.size())).add(static_cast<int64_t>(max_snoozes));
  for (const auto& item : items) {
    const char* mode = "retry";
    switch (item.mode) {
      case NackMode::retry: mode = "retry"; break;
      case NackMode::now: mode = "now"; break;
      case NackMode::lost: mode = "lost"; break;
      case NackMode::lost_beside: mode = "lost_beside"; break;
      case NackMode::shared: mode = "shared"; break;
      case NackMode::dead: mode = "dead"; break;
      case NackMode::handed_back: mode = "return"; break;
      case NackMode::cancel: mode = "cancel"; break;
      case NackMode::snooze: mode = "snooze"; break;
      case NackMode::expired: mode = "expired"; break;
    }
    call.add(item.id).add(token_text(item.token)).add(mode).add(item.reason);
    call.add(static_cast<int64_t>(schedule_partition(item.id))).add(item.worker);
    call.add(item.mode == NackMode::snooze ? item.snooze_ms : int64_t{0});
  }
  for (const auto& item : items) call.add(fmt::format("{:.6f}", item.jitter));
  call.add(keep_history ? "1" : "0");
  if (keep_history)
    for (const auto& item : items) call.add(item.started_ms > 0 ? std::to_string(item.started_ms) : std::string());
  return call;
}

Result<std::vector<AckStatus>> parse_ack(const redisReply* r) {
  static constexpr std::array kKnown{AckStatus::stale, AckStatus::applied};
  auto values = reply::integers(r, "ack");
  if (!values || values->empty()) return reply::bad(r, "ack");
  std::vector<AckStatus> out;
  for (size_t i = 0; i + 1 < values->size(); ++i) {
    const auto known = reply::code((*values)[i], kKnown);
    if (!known) return reply::bad(r, "ack");
    out.push_back(*known);
  }
  return out;
}

int64_t released_due(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements == 0) return -1;
  const redisReply* last = r->element[r->elements - 1];
  return last->type == REDIS_REPLY_INTEGER ? last->integer : -1;
}

Result<std::vector<NackOutcome>> parse_nack(const redisReply* r) {
  static constexpr std::array kKnown{NackStatus::stale, NackStatus::retried, NackStatus::dead, NackStatus::cancelled};
  auto values = reply::integers(r, "nack");
  if (!values) return std::unexpected(values.error());
  if (values->size() % 2 != 1) return reply::bad(r, "nack");
  std::vector<NackOutcome> out;
  for (size_t i = 0; i + 1 < values->size(); i += 2) {
    const auto known = reply::code((*values)[i], kKnown);
    if (!known) return reply::bad(r, "nack");
    out.push_back({*known, (*values)[i + 1]});
  }
  return out;
}

}  // namespace calls

void Results::on_results(const Peer& worker, std::vector<proto::JobResult>&& items) {
  for (auto& item : items) {
    // Refused, not kept: the job dies with why (its handler would return
    // the same again, and it ran: a retry would repeat its effects).
    if (item.outcome == proto::Outcome::done && item.result.data.size() > proto::JobResult::kMaxResultBytes) {
      item.outcome = proto::Outcome::failed_final;
      item.error = fmt::format("its result of {} bytes is over the {}-byte limit", item.result.data.size(),
                               proto::JobResult::kMaxResultBytes);
      item.result.data.clear();
    }
    // Credit comes back now; Redis decides (by token) whether it counts.
    const int64_t started_ms = inflight_.remove(item.queue, item.id, item.token);
    pending_.push_back(Pending{worker, std::move(item), started_ms});
  }
}

bool Results::has_work() const {
  if (refusals_.holding()) return false;
  for (const auto& p : pending_)
    if (!refusals_.holding(p.result.queue)) return true;
  for (const auto& [name, items] : requeues_)
    if (!items.empty() && !refusals_.holding(name)) return true;
  return false;
}

void Results::add_to(Round& round) {
  if (refusals_.holding()) return;
  // Acks and nacks per queue, at most kResultChunk per call.
  std::map<std::pair<std::string, bool>, std::vector<Pending>> open;
  std::vector<Pending> held;
  for (auto& pending : std::exchange(pending_, {})) {
    if (refusals_.holding(pending.result.queue)) {  // its slot is moving
      held.push_back(std::move(pending));
      continue;
    }
    const bool ack = pending.result.outcome == proto::Outcome::done;
    auto key = std::make_pair(pending.result.queue, ack);
    auto& batch = open[key];
    batch.push_back(std::move(pending));
    if (batch.size() == kResultChunk) {
      add_result_call(round, key.first, ack, std::move(batch));
      open.erase(key);
    }
  }
  for (auto& [key, batch] : open) add_result_call(round, key.first, key.second, std::move(batch));
  for (auto& pending : held) pending_.push_back(std::move(pending));
  add_requeue_calls(round);
}

void Results::add_result_call(Round& round, const std::string& queue, bool ack, std::vector<Pending>&& batch) {
  const auto& policy = config_.policy(queue);
  const int64_t now = clock_.wall_ms();
  Command call;
  if (ack) {
    std::vector<AckItem> items;
    items.reserve(batch.size());
    for (const auto& p : batch) items.push_back({p.result.id, p.result.token, p.started_ms, p.worker.routing_id, p.result.result.data});
    call = calls::ack(queue, now, policy.done_retention_s, items, policy.keeps_history());
  } else {
    std::vector<NackItem> items;
    std::uniform_real_distribution<double> jitter(0.0, 1.0);
    for (const auto& p : batch) {
      const auto& r = p.result;
      const auto mode = r.outcome == proto::Outcome::failed_final ? NackMode::dead
                        : r.outcome == proto::Outcome::cancelled  ? NackMode::cancel
                        : r.outcome == proto::Outcome::snoozed    ? NackMode::snooze
                        : r.outcome == proto::Outcome::expired    ? NackMode::expired
                                                                  : NackMode::retry;
      const char* fallback = mode == NackMode::snooze ? "snoozed" : "failed";
      items.push_back({r.id, r.token, mode, r.error.empty() ? fallback : r.error, jitter(rng_), p.worker.routing_id,
                       p.started_ms, r.snooze_ms});
    }
    call = calls::nack(queue, now, policy.backoff_base_ms, policy.backoff_cap_ms, policy.done_retention_s, items,
                       policy.keeps_history(), static_cast<uint32_t>(policy.max_snoozes));
    // A retry due at once is ready when the round's lease runs.
    queues_.get(queue).ready_this_round = true;
  }
  // A finished job's key may have a parked job its turn lets run.
  if (queues_.get(queue).keys_parked) queues_.get(queue).ready_this_round = true;
  round.add(std::move(call), [this, queue, ack, now, batch = std::move(batch)](const redisReply* r) mutable {
    if (r == nullptr || !reply_error(r).empty()) {
      // Not applied: kept (the worker resends until CONFIRM anyway).
      if (r != nullptr) refusals_.refused(queue, fmt::format("{} on '{}' ({} results kept)", ack ? "ack" : "nack", queue,
                                                      batch.size() + pending_.size()),
                                          reply_error(r));
      for (auto& p : batch) pending_.push_back(std::move(p));
      return;
    }
    refusals_.succeeded();
    queues_.get(queue).sweep_soon(clock_.steady_ms());
    if (queues_.get(queue).keys_parked) queues_.get(queue).maybe_ready = true;
    if (ack) tell_waits(queue, now, batch, r);
    else note_nack_outcomes(queue, now, r);
    queues_.get(queue).released_at(calls::released_due(r));
    // Applied (stale ones included: Redis rejected them for good).
    std::map<std::string, std::pair<Peer, proto::Confirm>> confirms;  // by routing id
    for (const auto& p : batch) {
      auto& [peer, confirm] = confirms[p.worker.routing_id];
      peer = p.worker;
      confirm.items.push_back({p.result.queue, p.result.id, p.result.token});
    }
    for (const auto& [rid, c] : confirms) outbox_.send(c.first, c.second);
  });
}

// Retries due again: when; jobs a nack ended (dead, cancelled): their waits read how.
void Results::note_nack_outcomes(const std::string& queue, int64_t now, const redisReply* r) {
  QueueState& q = queues_.get(queue);
  auto outcomes = calls::parse_nack(r);
  if (!outcomes) return;
  for (const auto& o : *outcomes) {
    if (o.status == NackStatus::retried) {
      if (o.due_ms > now) q.next_due_ms = earliest_known(q.next_due_ms, o.due_ms);
      else q.maybe_ready = true;
    } else if (o.status != NackStatus::stale) {
      waits_.changed(queue);
    }
  }
}

// The acks Redis applied end their jobs: the requests waiting for them are
// answered with the results the acks carried.
void Results::tell_waits(const std::string& queue, int64_t now, const std::vector<Pending>& batch, const redisReply* r) {
  if (waits_.idle()) return;  // the common case: no reply to parse
  auto applied = calls::parse_ack(r);
  if (!applied || applied->size() != batch.size()) return;
  for (size_t i = 0; i < batch.size(); ++i)
    if ((*applied)[i] == AckStatus::applied && waits_.waits_for(queue, batch[i].result.id))
      waits_.ended(queue, batch[i].result.id, JobEnd{"done", now, batch[i].result.result.data, {}});
}

// Jobs of lost workers go back at once (an attempt if their start was
// seen: NackMode::now / lost), handed-back ones too. A mass
// failure is spread over rounds: at most kRequeuePerRound per queue per
// round, so Redis is never blocked by one huge script call.
void Results::add_requeue_calls(Round& round) {
  const int64_t now = clock_.wall_ms();
  for (auto it = requeues_.begin(); it != requeues_.end();) {
    auto& [name, items] = *it;
    if (refusals_.holding(name)) {  // its slot is moving
      ++it;
      continue;
    }
    const size_t take = std::min(items.size(), kRequeuePerRound);
    std::vector<NackItem> chunk(std::make_move_iterator(items.begin()), std::make_move_iterator(items.begin() + take));
    items.erase(items.begin(), items.begin() + take);
    const auto& policy = config_.policy(name);
    Command call = calls::nack(name, now, policy.backoff_base_ms, policy.backoff_cap_ms, policy.done_retention_s, chunk,
                               policy.keeps_history());
    round.add(std::move(call), [this, name, chunk = std::move(chunk)](const redisReply* r) mutable {
                if (r == nullptr) {
                  // Not known to be applied: again next round (a stale token makes a repeat harmless).
                  for (auto& item : chunk) requeues_[name].push_back(std::move(item));
                } else if (auto err = reply_error(r); !err.empty()) {
                  // The leases run out and reclaim returns these jobs.
                  refusals_.refused(name, fmt::format("requeue on '{}'", name), err);
                } else {
                  queues_.get(name).maybe_ready = true;
                  queues_.get(name).released_at(calls::released_due(r));
                  waits_.changed(name);  // a lost job's last attempt ends it dead
                }
              });
    queues_.get(name).ready_this_round = true;
    it = items.empty() ? requeues_.erase(it) : std::next(it);
  }
}

}  // namespace dueq::broker
