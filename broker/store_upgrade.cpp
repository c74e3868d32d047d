#include "broker/store_upgrade.hpp"

#include "broker/auditor.hpp"
#include "broker/keys.hpp"

namespace dueq::broker {

namespace calls {

Command migrate_schedule(const std::string& queue, const std::vector<std::string>& ids) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::migrate_schedule, {k.legacy_scheduled, k.schedule, k.jobs, k.stats});
  for (const auto& id : ids) call.add(id).add(static_cast<int64_t>(schedule_partition(id)));
  return call;
}

}  // namespace calls

Result<bool> build_missing_schedule_filter(ScriptRegistry& redis, const std::string& queue) {
  const QueueKeys keys(queue);
  auto counts = redis.pipeline({Command{"EXISTS", keys.schedule_filter}, Command{"ZCARD", keys.schedule}});
  if (!counts) return std::unexpected(counts.error());
  for (const auto& r : *counts)
    if (r->type != REDIS_REPLY_INTEGER) return reply::bad(r.get(), "EXISTS/ZCARD");
  const bool has_filter = (*counts)[0]->integer != 0, has_schedule = (*counts)[1]->integer != 0;
  if (has_filter || !has_schedule) return false;
  // Built aside and renamed into place, so a broker stopped halfway leaves
  // no partial filter behind for the next one to trust.
  const std::string building = keys.schedule_filter + ":building";
  if (auto ok = redis.call(Command{"DEL", building}); !ok) return std::unexpected(ok.error());
  auto built = check_schedule_filter(redis, queue, building, true);
  if (!built) return std::unexpected(built.error());
  // No counter is written when every partition is empty: nothing to rename.
  if (built->empty()) return false;
  auto renamed = redis.call(Command{"RENAME", building, keys.schedule_filter});
  if (!renamed) return std::unexpected(renamed.error());
  if ((*renamed)->type == REDIS_REPLY_ERROR) return reply::bad(renamed->get(), "RENAME");
  return true;
}

Result<int64_t> migrate_legacy_schedule(ScriptRegistry& redis, const std::string& queue) {
  const QueueKeys keys(queue);
  int64_t moved = 0;
  while (true) {
    // Each call removes the ids it was given from the old set, so this ends.
    auto range = redis.call(Command{"ZRANGE", keys.legacy_scheduled, "0", "499"});
    if (!range) return std::unexpected(range.error());
    auto ids = reply::strings(range->get(), "ZRANGE");
    if (!ids) return std::unexpected(ids.error());
    if (ids->empty()) return moved;
    auto r = redis.call(calls::migrate_schedule(queue, *ids));
    if (!r) return std::unexpected(r.error());
    if ((*r)->type != REDIS_REPLY_INTEGER) return reply::bad(r->get(), "migrate_schedule");
    moved += (*r)->integer;
  }
}

}  // namespace dueq::broker
