// The script calls of the operator commands (cancel, replay, purge,
// reschedule, pause) and the parsers of their replies.
#include <xxhash.h>

#include "broker/admin/admin_commands.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"

namespace dueq::broker {

namespace calls {

Command cancel(const std::string& queue, int64_t now_ms, const std::string& id, int64_t retention_s, bool keep_history) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::cancel, {k.schedule, k.ready, k.leased, k.dead, k.done, k.cancelled, k.stats, k.jobs,
                                             k.tokens, k.attempts, k.errors, k.error_logs, k.cancel_requested, k.unconfirmed,
                                             k.history, k.key_held, k.key_running, k.key_parked, k.unique, k.snoozes,
                                             k.groups, k.fair})
      .add(now_ms)
      .add(id)
      .add(retention_s)
      .add(static_cast<int64_t>(schedule_partition(id)))
      .add(keep_history ? "1" : "0");
}

Result<CancelOutcome> parse_cancel(const redisReply* r) {
  static constexpr std::array kKnown{CancelStatus::already_finished, CancelStatus::not_found, CancelStatus::cancelled,
                                     CancelStatus::cancel_requested};
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[2]->type != REDIS_REPLY_INTEGER)
    return reply::bad(r, "cancel");
  const auto known = reply::code(r->element[0]->integer, kKnown);
  if (!known) return reply::bad(r, "cancel");
  const int64_t released = r->element[2]->integer;
  if (*known != CancelStatus::cancel_requested) return CancelOutcome{*known, 0, released};
  auto token = token_from_text(reply::str(r->element[1]));
  if (!token) return reply::bad(r, "cancel");
  return CancelOutcome{*known, *token, released};
}

Result<PauseOutcome> parse_pause(const redisReply* r) {
  static constexpr std::array kKnown{PauseChange::already_so, PauseChange::changed};
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER || r->element[1]->integer < 0)
    return reply::bad(r, "pause");
  const auto change = reply::code(r->element[0]->integer, kKnown);
  if (!change) return reply::bad(r, "pause");
  return PauseOutcome{*change, r->element[1]->integer};
}

namespace {
Command replay_call(const std::string& queue) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::replay, {k.dead, k.ready, k.stats, k.jobs, k.attempts, k.cancel_requested, k.unconfirmed, k.snoozes});
}
Command purge_call(const std::string& queue) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::purge, {k.dead, k.stats, k.jobs, k.tokens, k.attempts, k.errors, k.error_logs, k.unconfirmed, k.snoozes});
}
}  // namespace

Command reschedule(const std::string& queue, int64_t now_ms, int64_t due_ms, const std::vector<std::string>& ids,
                   int64_t spread_ms) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::reschedule, {k.schedule, k.ready, k.stats, k.jobs, k.groups})
                     .add(now_ms)
                     .add(static_cast<int64_t>(ids.size()));
  for (const auto& id : ids) {
    // Seeded apart from the schedule partition's hash of the same id.
    const uint64_t offset = spread_ms > 0 ? XXH3_64bits_withSeed(id.data(), id.size(), 0x5e7ead) % static_cast<uint64_t>(spread_ms) : 0;
    call.add(id).add(static_cast<int64_t>(schedule_partition(id))).add(due_ms + static_cast<int64_t>(offset));
  }
  return call;
}

Command replay(const std::string& queue, int64_t now_ms, const std::vector<std::string>& ids) {
  Command call = replay_call(queue).add(now_ms).add(static_cast<int64_t>(ids.size()));
  for (const auto& id : ids) call.add(id);
  return call;
}

Command pause(const std::string& queue, bool pause, int64_t now_ms) {
  return script_call(lua::ScriptId::pause, {QueueKeys(queue).paused}).add(pause ? "pause" : "resume").add(now_ms);
}

Command replay_oldest(const std::string& queue, int64_t now_ms, int limit) {
  return replay_call(queue).add(now_ms).add(int64_t{0}).add(limit);
}

Command purge(const std::string& queue, const std::vector<std::string>& ids) {
  Command call = purge_call(queue).add(static_cast<int64_t>(ids.size()));
  for (const auto& id : ids) call.add(id);
  return call;
}

Command purge_dead_before(const std::string& queue, int64_t cutoff_ms, int limit) {
  return purge_call(queue).add(int64_t{0}).add(cutoff_ms).add(limit);
}

}  // namespace calls

}  // namespace dueq::broker
