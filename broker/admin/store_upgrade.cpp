#include "broker/admin/store_upgrade.hpp"

#include <spdlog/spdlog.h>

#include "broker/admin/auditor.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"

namespace dueq::broker {

namespace calls {

Command migrate_schedule(const std::string& queue, const std::vector<std::string>& ids) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::migrate_schedule, {k.legacy_scheduled, k.schedule, k.jobs, k.stats});
  for (const auto& id : ids) call.add(id).add(static_cast<int64_t>(schedule_partition(id)));
  return call;
}

Result<int64_t> parse_migrate_schedule(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_INTEGER || r->integer < 0) return reply::bad(r, "migrate_schedule");
  return r->integer;
}

}  // namespace calls

namespace {

Command all_filter_chunks(const char* verb, const std::string& prefix) {
  Command command{verb};
  for (uint32_t c = 0; c < kScheduleFilterChunks; ++c) command.add(schedule_filter_chunk_key(prefix, c));
  return command;
}

}  // namespace

Result<bool> build_missing_schedule_filter(RedisClient& redis, const std::string& queue) {
  const QueueKeys keys(queue);
  // A store written before the filter came in chunks has it as one string
  // under the chunks' prefix: it is rebuilt in chunks and then dropped.
  auto counts = redis.pipeline({all_filter_chunks("EXISTS", keys.schedule_filter), Command{"ZCARD", keys.schedule},
                                Command{"EXISTS", keys.schedule_filter}});
  if (!counts) return std::unexpected(counts.error());
  for (const auto& r : *counts)
    if (r->type != REDIS_REPLY_INTEGER) return reply::bad(r.get(), "EXISTS/ZCARD");
  const bool has_filter = (*counts)[0]->integer != 0, has_schedule = (*counts)[1]->integer != 0,
             has_single_string = (*counts)[2]->integer != 0;
  if (has_filter || !has_schedule) {
    if (has_single_string)
      if (auto ok = redis.call(Command{"DEL", keys.schedule_filter}); !ok) return std::unexpected(ok.error());
    return false;
  }
  // Built aside and moved into place in one transaction, so a broker
  // stopped halfway leaves no partial filter behind for the next to trust.
  const std::string building = keys.schedule_filter + ":building";
  if (auto ok = redis.call(all_filter_chunks("DEL", building)); !ok) return std::unexpected(ok.error());
  auto built = check_schedule_filter(redis, queue, building, true);
  if (!built) return std::unexpected(built.error());
  std::vector<Command> exists;
  for (uint32_t c = 0; c < kScheduleFilterChunks; ++c) exists.push_back(Command{"EXISTS", schedule_filter_chunk_key(building, c)});
  auto written = redis.pipeline(std::move(exists));
  if (!written) return std::unexpected(written.error());
  std::vector<Command> move{Command{"MULTI"}, Command{"DEL", keys.schedule_filter}};
  for (uint32_t c = 0; c < kScheduleFilterChunks; ++c) {
    const redisReply* r = (*written)[c].get();
    if (r->type != REDIS_REPLY_INTEGER) return reply::bad(r, "EXISTS");
    if (r->integer != 0)
      move.push_back(Command{"RENAME", schedule_filter_chunk_key(building, c), schedule_filter_chunk_key(keys.schedule_filter, c)});
  }
  // No counter is written when every partition is empty: nothing to move.
  if (move.size() == 2) return false;
  move.push_back(Command{"EXEC"});
  auto moved = redis.pipeline(std::move(move));
  if (!moved) return std::unexpected(moved.error());
  const redisReply* exec = moved->back().get();
  if (exec->type != REDIS_REPLY_ARRAY) return reply::bad(exec, "MULTI/EXEC");
  for (size_t i = 0; i < exec->elements; ++i)
    if (exec->element[i]->type == REDIS_REPLY_ERROR) return reply::bad(exec->element[i], "RENAME");
  return true;
}

Result<size_t> move_legacy_queue_set(RedisClient& redis) {
  auto members = redis.call(Command{"SMEMBERS", kLegacyQueuesKey});
  if (!members) return std::unexpected(members.error());
  auto names = reply::strings(members->get(), "SMEMBERS");
  if (!names) return std::unexpected(names.error());
  if (names->empty()) return size_t{0};
  constexpr size_t kNamesPerCall = 1000;
  std::vector<Command> adds;
  for (size_t i = 0; i < names->size(); i += kNamesPerCall) {
    Command add{"SADD", kQueuesKey};
    for (size_t j = i; j < std::min(names->size(), i + kNamesPerCall); ++j) add.add((*names)[j]);
    adds.push_back(std::move(add));
  }
  auto added = redis.pipeline(std::move(adds));
  if (!added) return std::unexpected(added.error());
  for (const auto& r : *added)
    if (r->type != REDIS_REPLY_INTEGER) return reply::bad(r.get(), "SADD");
  if (auto ok = redis.call(Command{"DEL", kLegacyQueuesKey}); !ok) return std::unexpected(ok.error());
  spdlog::info("store upgrade: moved {} queue names from {} to {}", names->size(), kLegacyQueuesKey, kQueuesKey);
  return names->size();
}

Result<int64_t> migrate_legacy_schedule(RedisClient& redis, const std::string& queue) {
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
    auto n = calls::parse_migrate_schedule(r->get());
    if (!n) return std::unexpected(n.error());
    moved += *n;
  }
}

void add_upgrade_probe(std::vector<Command>& commands, const std::string& queue) {
  const QueueKeys keys(queue);
  commands.push_back(all_filter_chunks("EXISTS", keys.schedule_filter));
  commands.push_back(Command{"ZCARD", keys.schedule});
  commands.push_back(Command{"EXISTS", keys.schedule_filter});
  commands.push_back(Command{"EXISTS", keys.legacy_scheduled});
}

Result<bool> upgrade_due(std::span<const ReplyPtr> replies) {
  if (replies.size() != kUpgradeProbeCommands) return fail(Errc::internal, "upgrade probe: wrong number of replies");
  for (const auto& r : replies)
    if (r->type != REDIS_REPLY_INTEGER) return reply::bad(r.get(), "EXISTS/ZCARD");
  const bool has_filter = replies[0]->integer != 0, has_schedule = replies[1]->integer != 0;
  const bool has_single_string = replies[2]->integer != 0, has_legacy_schedule = replies[3]->integer != 0;
  return has_single_string || (has_schedule && !has_filter) || has_legacy_schedule;
}

Result<void> upgrade_queue(RedisClient& redis, const std::string& queue) {
  auto built = build_missing_schedule_filter(redis, queue);
  if (!built) return std::unexpected(built.error());
  if (*built) spdlog::info("queue '{}': built the schedule filter", queue);
  auto moved = migrate_legacy_schedule(redis, queue);
  if (!moved) return std::unexpected(moved.error());
  if (*moved > 0) spdlog::info("queue '{}': moved {} scheduled jobs into the partitioned schedule", queue, *moved);
  return {};
}

}  // namespace dueq::broker
