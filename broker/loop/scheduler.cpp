#include "broker/loop/scheduler.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "broker/store/keys.hpp"

namespace dueq::broker {

namespace {
constexpr int kSweepLimit = 5000;  // done/cancelled entries removed per sweep call
constexpr int64_t kSweepIntervalMs = 1000;
// A queue with nothing to sweep soon is still swept this often: ids that
// finished outside the loop's sight (a cancel from the admin connection)
// are counted against done_max within it.
constexpr int64_t kIdleSweepMs = 30'000;
}  // namespace

namespace calls {

Command promote(const std::string& queue, int64_t now_ms, int limit, bool fair) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::promote, {k.schedule, k.ready, k.jobs, k.stats, k.fair, k.key_weights})
      .add(now_ms)
      .add(limit)
      .add(fair ? "1" : "0");
}

Result<PromoteOutcome> parse_promote(const redisReply* r) {
  auto values = reply::integers(r, "promote");
  if (!values || values->size() != 2) return reply::bad(r, "promote");
  return PromoteOutcome{(*values)[0], (*values)[1]};
}

Command reclaim(const std::string& queue, int64_t now_ms, int limit, int64_t retention_s, bool keep_history) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::reclaim, {k.leased, k.ready, k.dead, k.stats, k.jobs, k.tokens, k.attempts,
                                              k.errors, k.error_logs, k.cancel_requested, k.cancelled, k.started,
                                              k.unconfirmed, k.history, k.key_held, k.key_running, k.key_parked,
                                              k.unique, k.groups, k.schedule, k.fair})
      .add(now_ms)
      .add(limit)
      .add(retention_s)
      .add(keep_history ? "1" : "0");
}

Result<ReclaimOutcome> parse_reclaim(const redisReply* r) {
  auto values = reply::integers(r, "reclaim");
  if (!values || values->size() != 5) return reply::bad(r, "reclaim");
  return ReclaimOutcome{(*values)[0], (*values)[1], (*values)[2], (*values)[3], (*values)[4]};
}

Command sweep(const std::string& queue, int64_t cutoff_ms, int limit, int64_t max_kept, int64_t window_start_ms,
              int64_t history_cutoff_ms, int64_t history_max) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::sweep, {k.done, k.cancelled, k.stats, k.history, k.results, k.groups})
      .add(cutoff_ms)
      .add(limit)
      .add(max_kept)
      .add(std::max(cutoff_ms, window_start_ms))
      .add(std::max(cutoff_ms, history_cutoff_ms))
      .add(std::clamp<int64_t>(history_max, 0, max_kept));
}

Result<SweepOutcome> parse_sweep(const redisReply* r) {
  auto values = reply::integers(r, "sweep");
  if (!values) return std::unexpected(values.error());
  if (values->size() != 8) return reply::bad(r, "sweep");
  const auto& v = *values;
  return SweepOutcome{v[0], v[1], v[2], v[3], v[4], v[5], v[6] == 1, v[7]};
}

Command align_leases(const std::string& queue, int64_t grace_ms, int limit) {
  return script_call(lua::ScriptId::align_leases, {QueueKeys(queue).leased}).add(grace_ms).add(limit);
}

}  // namespace calls

int64_t Scheduler::grace_deadline() const {
  return lease_clock_.now_ms() + config_.worker_timeout_ms + config_.delivery_timeout_ms;
}

Result<void> Scheduler::align_previous_leases(RedisClient& redis, std::span<const std::string> queues, int64_t grace_ms) {
  std::vector<std::string> left(queues.begin(), queues.end());
  while (!left.empty()) {
    std::vector<Command> caps;
    caps.reserve(left.size());
    for (const auto& name : left) caps.push_back(calls::align_leases(name, grace_ms, config_.reclaim_batch));
    auto replies = redis.pipeline(std::move(caps));
    if (!replies) return std::unexpected(replies.error());
    std::vector<std::string> more;
    for (size_t i = 0; i < left.size(); ++i) {
      auto capped = reply::integers((*replies)[i].get(), "align_leases");
      if (!capped) return std::unexpected(capped.error());
      if (!capped->empty() && (*capped)[0] >= config_.reclaim_batch) more.push_back(std::move(left[i]));
    }
    left = std::move(more);
  }
  return {};
}

void Scheduler::add_to(Round& round) {
  if (refusals_.holding() || queues_.size() == 0) return;
  RoundTimes at{clock_.wall_ms(), lease_clock_.now_ms(), clock_.steady_ms()};
  size_t calls = 0;
  // Round-robin from where the last round stopped: a store of many queues
  // is worked through in rounds of bounded size, so that nothing queued
  // behind one (the lease renewal of the next turn) waits long for Redis.
  auto it = queues_.lower_bound(cursor_);
  for (size_t seen = 0; seen < queues_.size() && calls < kMaxCallsPerRound; ++seen, ++it) {
    if (it == queues_.end()) it = queues_.begin();
    auto& [name, q] = *it;
    if (refusals_.holding(name)) continue;  // its slot is moving
    // Nothing of a queue not registered is in Redis (its first write waits
    // for that, Enqueuer::ready_for_writes): a fenced call would write its
    // epoch key, behind a Redis Cluster even for a deposed leader.
    if (!q.registered) continue;
    const size_t before = round.calls();
    if (q.next_due_ms >= 0 && q.next_due_ms <= at.wall_ms) add_promote(round, name, q, at);
    if (q.next_deadline_ms >= 0 && q.next_deadline_ms <= at.lease_ms) add_reclaim(round, name, q, at);
    if (config_.policy(name).done_retention_s > 0 && at.steady_ms >= q.next_sweep_ms) add_sweep(round, name, q, at);
    calls += round.calls() - before;
  }
  cursor_ = it == queues_.end() ? std::string() : it->first;
}

void Scheduler::add_promote(Round& round, const std::string& name, QueueState& q, const RoundTimes& at) {
  q.ready_this_round = true;
  const int64_t now = at.wall_ms;
  round.add(calls::promote(name, now, config_.promote_batch, config_.policy(name).fair), [this, name, now](const redisReply* r) {
    if (r == nullptr) return;  // a reconnect promotes every queue again
    QueueState& q = queues_.get(name);
    auto p = calls::parse_promote(r);
    if (!p) return refusals_.refused(name, fmt::format("promote on '{}'", name), p.error().message);
    refusals_.succeeded();
    if (p->moved > 0) q.maybe_ready = true;
    // More due jobs than one batch: promote again at once.
    q.next_due_ms = p->moved == config_.promote_batch ? now : p->next_due_ms;
  });
}

void Scheduler::add_reclaim(Round& round, const std::string& name, QueueState& q, RoundTimes& at) {
  q.ready_this_round = true;
  const int64_t lease_now = at.lease_ms;
  // Redis re-leases these with new tokens: the broker's copies are stale.
  if (!at.inflight_expired)
    inflight_.expire(lease_now, [this](const InflightJob& job) { workers_.on_delivery_expired(job); });
  at.inflight_expired = true;
  const auto& policy = config_.policy(name);
  round.add(calls::reclaim(name, lease_now, config_.reclaim_batch, policy.done_retention_s, policy.keeps_history()),
            [this, name, lease_now](const redisReply* r) {
              if (r == nullptr) return;
              QueueState& q = queues_.get(name);
              auto c = calls::parse_reclaim(r);
              if (!c) return refusals_.refused(name, fmt::format("reclaim on '{}'", name), c.error().message);
              refusals_.succeeded();
              if (c->requeued + c->dead > 0)
                spdlog::info("queue '{}': {} expired leases re-queued ({} never seen to start, no attempt "
                             "used), {} dead-lettered",
                             name, c->requeued, c->not_counted, c->dead);
              if (c->requeued > 0 || (q.keys_parked && c->dead > 0)) q.maybe_ready = true;
              q.released_at(c->released_due_ms);
              q.next_deadline_ms = c->requeued + c->dead == config_.reclaim_batch ? lease_now : c->next_deadline_ms;
            });
}

void Scheduler::add_sweep(Round& round, const std::string& name, QueueState& q, const RoundTimes& at) {
  const int64_t steady_now = at.steady_ms;
  // The reply says when the next one is due; a job that finishes meanwhile
  // asks for one sooner (QueueState::sweep_soon).
  q.next_sweep_ms = std::numeric_limits<int64_t>::max();
  const auto& policy = config_.policy(name);
  const int64_t now = at.wall_ms;
  // A queue that keeps no history trims every entry left (it kept some
  // before a restart with history turned off).
  const int64_t history_cutoff = policy.keeps_history() ? now - policy.history_retention_s * 1000 : now;
  round.add(calls::sweep(name, now - policy.done_retention_s * 1000, kSweepLimit, policy.done_max,
                         now - policy.duplicate_window_ms, history_cutoff, policy.keeps_history() ? policy.history_max : 0),
            [this, name, steady_now, now](const redisReply* r) {
    QueueState* swept_queue = queues_.find(name);
    if (swept_queue == nullptr) return;  // deleted meanwhile
    auto again_in = [&](int64_t ms) { swept_queue->next_sweep_ms = std::min(swept_queue->next_sweep_ms, steady_now + ms); };
    if (r == nullptr) return again_in(kSweepIntervalMs);
    auto swept = calls::parse_sweep(r);
    if (!swept) {
      again_in(kSweepIntervalMs);
      return refusals_.refused(name, fmt::format("sweep on '{}'", name), swept.error().message);
    }
    again_in(ms_until_next_sweep(name, *swept, now));
    if (swept->forgotten_early > 0)
      if (auto held_back = forgotten_log_.admit(name, steady_now))
        spdlog::warn("queue '{}': {} finished ids forgotten before done_retention to stay within done_max ({} "
                     "more such sweeps not logged); a resent enqueue of one of them makes a new job",
                     name, swept->forgotten_early, *held_back);
    if (swept->history_trimmed > 0) log_history_trim(name, swept->history_trimmed, steady_now);
  });
}

// One line per queue a minute at most, with every trim since the last.
void Scheduler::log_history_trim(const std::string& name, int64_t trimmed, int64_t steady_now) {
  int64_t& unlogged = history_trims_unlogged_[name];
  unlogged += trimmed;
  if (!history_log_.admit(name, steady_now)) return;
  const auto& policy = config_.policy(name);
  spdlog::info("queue '{}': {} finished jobs' documents trimmed from its history (history_retention {} s, "
               "history_max {}); their ids stay for done_retention",
               name, unlogged, policy.keeps_history() ? policy.history_retention_s : 0,
               policy.keeps_history() ? policy.history_max : 0);
  history_trims_unlogged_.erase(name);
}

// At once while a call hit its limit (more is past retention). Otherwise
// once the earliest id left may be removable, by its retention or, over
// done_max, by the duplicate window (the sooner of the two, so never late),
// within [kSweepIntervalMs, kIdleSweepMs]: 20,000 idle queues cost no
// sweep a second each.
int64_t Scheduler::ms_until_next_sweep(const std::string& name, const SweepOutcome& swept, int64_t wall_now_ms) const {
  if (std::max(swept.done, swept.cancelled) == kSweepLimit || swept.history_more) return 0;
  if (swept.earliest_finish_ms < 0) return kIdleSweepMs;
  const auto& policy = config_.policy(name);
  int64_t removable_at =
      swept.earliest_finish_ms + std::min(policy.done_retention_s * 1000, policy.duplicate_window_ms);
  // A kept document goes at the end of its history_retention (history_max
  // is applied as jobs finish: QueueState::sweep_soon).
  if (swept.earliest_history_ms >= 0)
    removable_at = std::min(removable_at, swept.earliest_history_ms +
                                              (policy.keeps_history() ? policy.history_retention_s * 1000 : 0));
  return std::clamp(removable_at - wall_now_ms, kSweepIntervalMs, kIdleSweepMs);
}

int64_t Scheduler::us_until_next(int64_t wall_us_now) const {
  if (refusals_.holding()) return refusals_.us_until_retry();
  const int64_t lease_now = lease_clock_.now_ms();
  int64_t until = -1;
  for (const auto& [name, q] : queues_) {
    // Due times at microsecond precision: the timer is set to the due
    // millisecond itself, not up to a millisecond after it.
    if (q.next_due_ms >= 0) until = earliest_known(until, std::max<int64_t>(0, q.next_due_ms * 1000 - wall_us_now));
    if (q.next_deadline_ms >= 0) until = earliest_known(until, std::max<int64_t>(0, (q.next_deadline_ms - lease_now) * 1000));
  }
  return until;
}

}  // namespace dueq::broker
