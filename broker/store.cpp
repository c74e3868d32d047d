#include "broker/store.hpp"

#include <fmt/format.h>

#include "broker/job_record.hpp"

namespace dueq::broker {

namespace {

std::unexpected<Error> bad_reply(const redisReply* reply, const char* what) {
  if (auto err = reply_error(reply); !err.empty())
    return fail(Errc::internal, fmt::format("{}: Redis said: {}", what, err));
  return fail(Errc::internal, fmt::format("{}: unexpected reply shape", what));
}

std::string str(const redisReply* r) {
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) return std::string(r->str, r->len);
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  return {};
}

int64_t num(const redisReply* r) {
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type == REDIS_REPLY_STRING) return std::strtoll(r->str, nullptr, 10);
  return 0;
}

bool is_noscript(const redisReply* reply) { return reply_error(reply).starts_with("NOSCRIPT"); }

}  // namespace

size_t Round::script(lua::ScriptId id, std::vector<std::string> keys, Command args) {
  scripts_.push_back(id);
  keys_.push_back(std::move(keys));
  commands_.push_back(std::move(args));
  return commands_.size() - 1;
}

size_t Round::command(Command command) {
  scripts_.push_back(std::nullopt);
  keys_.emplace_back();
  commands_.push_back(std::move(command));
  return commands_.size() - 1;
}

size_t Round::enqueue(const std::string& queue, const std::vector<const proto::NewJob*>& jobs, int64_t now_ms,
                      uint32_t default_max_attempts, int64_t max_backlog) {
  QueueKeys k(queue);
  Command args;
  args.add(now_ms).add(max_backlog).add(static_cast<int64_t>(jobs.size()));
  for (const auto* job : jobs) {
    const int64_t due = job->due_ms == 0 ? now_ms : job->due_ms;
    args.add(job->id).add(due).add(encode_job_record(JobRecord{
        job->type, job->payload.data, due, job->max_attempts == 0 ? default_max_attempts : job->max_attempts, now_ms,
        job->backoff_base_ms, job->backoff_cap_ms}));
    args.add(static_cast<int64_t>(schedule_partition(job->id)));
  }
  return script(lua::ScriptId::enqueue, {k.schedule, k.ready, k.leased, k.stats, k.jobs, k.done, k.cancelled},
                std::move(args));
}

size_t Round::promote(const std::string& queue, int64_t now_ms, int limit) {
  QueueKeys k(queue);
  return script(lua::ScriptId::promote, {k.schedule, k.ready, k.jobs, k.stats}, Command().add(now_ms).add(limit));
}

size_t Round::lease(const std::string& queue, int64_t deadline_ms, int count) {
  QueueKeys k(queue);
  return script(lua::ScriptId::lease, {k.ready, k.leased, k.jobs, k.tokens, k.attempts, k.stats},
                Command().add(deadline_ms).add(count));
}

size_t Round::ack(const std::string& queue, int64_t now_ms, int64_t retention_s, const std::vector<TokenRef>& items) {
  QueueKeys k(queue);
  Command args;
  args.add(now_ms).add(retention_s).add(static_cast<int64_t>(items.size()));
  for (const auto& item : items) args.add(item.id).add(static_cast<int64_t>(item.token));
  return script(lua::ScriptId::ack,
                {k.leased, k.stats, k.jobs, k.tokens, k.attempts, k.errors, k.error_logs, k.cancel_requested, k.done},
                std::move(args));
}

size_t Round::nack(const std::string& queue, int64_t now_ms, int64_t base_ms, int64_t cap_ms, int64_t retention_s,
                   const std::vector<NackItem>& items) {
  QueueKeys k(queue);
  Command args;
  args.add(now_ms).add(base_ms).add(cap_ms).add(retention_s).add(static_cast<int64_t>(items.size()));
  for (const auto& item : items) {
    const char* mode = "retry";
    switch (item.mode) {
      case NackMode::retry: mode = "retry"; break;
      case NackMode::now: mode = "now"; break;
      case NackMode::dead: mode = "dead"; break;
      case NackMode::handed_back: mode = "return"; break;
      case NackMode::cancel: mode = "cancel"; break;
    }
    args.add(item.id).add(static_cast<int64_t>(item.token)).add(mode).add(item.reason);
    args.add(static_cast<int64_t>(schedule_partition(item.id)));
  }
  for (const auto& item : items) args.add(fmt::format("{:.6f}", item.jitter));
  return script(lua::ScriptId::nack,
                {k.schedule, k.ready, k.leased, k.dead, k.stats, k.jobs, k.tokens, k.attempts, k.errors, k.error_logs,
                 k.cancel_requested, k.cancelled},
                std::move(args));
}

size_t Round::extend(const std::string& queue, int64_t deadline_ms, const std::vector<TokenRef>& items) {
  QueueKeys k(queue);
  Command args;
  args.add(deadline_ms).add(static_cast<int64_t>(items.size()));
  for (const auto& item : items) args.add(item.id).add(static_cast<int64_t>(item.token));
  return script(lua::ScriptId::extend, {k.leased, k.stats, k.tokens}, std::move(args));
}

size_t Round::reclaim(const std::string& queue, int64_t now_ms, int limit, int64_t retention_s) {
  QueueKeys k(queue);
  return script(lua::ScriptId::reclaim,
                {k.leased, k.ready, k.dead, k.stats, k.jobs, k.tokens, k.attempts, k.errors, k.error_logs,
                 k.cancel_requested, k.cancelled},
                Command().add(now_ms).add(limit).add(retention_s));
}

size_t Round::cancel(const std::string& queue, int64_t now_ms, const std::string& id, int64_t retention_s) {
  QueueKeys k(queue);
  return script(lua::ScriptId::cancel,
                {k.schedule, k.ready, k.leased, k.dead, k.done, k.cancelled, k.stats, k.jobs, k.tokens, k.attempts,
                 k.errors, k.error_logs, k.cancel_requested},
                Command().add(now_ms).add(id).add(retention_s).add(static_cast<int64_t>(schedule_partition(id))));
}

size_t Round::replay(const std::string& queue, int64_t now_ms, const std::vector<std::string>& ids) {
  QueueKeys k(queue);
  Command args;
  args.add(now_ms).add(static_cast<int64_t>(ids.size()));
  for (const auto& id : ids) args.add(id);
  return script(lua::ScriptId::replay, {k.dead, k.ready, k.stats, k.jobs, k.attempts, k.cancel_requested},
                std::move(args));
}

size_t Round::replay_oldest(const std::string& queue, int64_t now_ms, int limit) {
  QueueKeys k(queue);
  return script(lua::ScriptId::replay, {k.dead, k.ready, k.stats, k.jobs, k.attempts, k.cancel_requested},
                Command().add(now_ms).add(int64_t{0}).add(limit));
}

namespace {
std::vector<std::string> purge_keys(const QueueKeys& k) {
  return {k.dead, k.stats, k.jobs, k.tokens, k.attempts, k.errors, k.error_logs};
}
}  // namespace

size_t Round::purge(const std::string& queue, const std::vector<std::string>& ids) {
  Command args;
  args.add(static_cast<int64_t>(ids.size()));
  for (const auto& id : ids) args.add(id);
  return script(lua::ScriptId::purge, purge_keys(QueueKeys(queue)), std::move(args));
}

size_t Round::purge_dead_before(const std::string& queue, int64_t cutoff_ms, int limit) {
  return script(lua::ScriptId::purge, purge_keys(QueueKeys(queue)), Command().add(int64_t{0}).add(cutoff_ms).add(limit));
}

namespace {
// Ids each followed by their schedule partition, as audit, repair and
// migrate_schedule take them.
Command ids_with_partitions(const std::vector<std::string>& ids) {
  Command args;
  for (const auto& id : ids) args.add(id).add(static_cast<int64_t>(schedule_partition(id)));
  return args;
}
}  // namespace

size_t Round::repair(const std::string& queue, const std::vector<std::string>& ids) {
  QueueKeys k(queue);
  return script(lua::ScriptId::repair, {k.schedule, k.ready, k.leased, k.dead, k.jobs, k.stats}, ids_with_partitions(ids));
}

size_t Round::migrate_schedule(const std::string& queue, const std::vector<std::string>& ids) {
  QueueKeys k(queue);
  return script(lua::ScriptId::migrate_schedule, {k.legacy_scheduled, k.schedule, k.jobs, k.stats},
                ids_with_partitions(ids));
}

size_t Round::filter_check(const std::string& queue, const std::string& filter_key, bool set,
                           const std::vector<uint32_t>& partitions) {
  Command args;
  args.add(set ? "set" : "check");
  for (uint32_t p : partitions) args.add(static_cast<int64_t>(p));
  return script(lua::ScriptId::filter_check, {QueueKeys(queue).schedule, filter_key}, std::move(args));
}

size_t Round::cap_leases(const std::string& queue, int64_t cap_ms, int limit) {
  QueueKeys k(queue);
  return script(lua::ScriptId::cap_leases, {k.leased}, Command().add(cap_ms).add(limit));
}

size_t Round::audit(const std::string& queue, const std::vector<std::string>& ids) {
  QueueKeys k(queue);
  return script(lua::ScriptId::audit, {k.schedule, k.ready, k.leased, k.dead, k.stats, k.jobs}, ids_with_partitions(ids));
}

size_t Round::sweep(const std::string& queue, int64_t cutoff_ms, int limit) {
  QueueKeys k(queue);
  return script(lua::ScriptId::sweep, {k.done, k.cancelled}, Command().add(cutoff_ms).add(limit));
}

size_t Round::scan_ids(const std::string& hash_key, const std::string& cursor, int count) {
  return script(lua::ScriptId::scan_ids, {hash_key}, Command().add(cursor).add(count));
}

size_t Round::show(const std::string& queue, const std::string& id) {
  QueueKeys k(queue);
  return script(lua::ScriptId::show,
                {k.schedule, k.ready, k.leased, k.dead, k.done, k.cancelled, k.jobs, k.tokens, k.attempts, k.errors,
                 k.error_logs, k.cancel_requested},
                Command().add(id).add(static_cast<int64_t>(schedule_partition(id))));
}

size_t Round::stats(const std::string& queue) {
  QueueKeys k(queue);
  return script(lua::ScriptId::stats, {k.schedule, k.ready, k.leased, k.dead, k.stats}, Command());
}

Result<void> Store::connect() {
  disconnect();
  auto conn = RedisConnection::connect(address_, timeout_ms_);
  if (!conn) return std::unexpected(conn.error());
  connection_.emplace(std::move(*conn));
  if (auto ok = load_scripts(); !ok) {
    connection_.reset();
    return ok;
  }
  return {};
}

Result<void> Store::load_scripts() {
  std::vector<Command> loads;
  for (const auto& script : lua::kScripts) loads.push_back(Command{"SCRIPT", "LOAD", script.source});
  auto replies = connection_->pipeline(loads);
  if (!replies) return std::unexpected(replies.error());
  for (size_t i = 0; i < lua::kScriptCount; ++i) {
    const redisReply* r = (*replies)[i].get();
    if (r->type != REDIS_REPLY_STRING)
      return fail(Errc::internal, fmt::format("loading script {}: {}", lua::kScripts[i].name, reply_error(r)));
    shas_[i] = str(r);
  }
  return {};
}

Result<std::vector<std::optional<std::string>>> Store::config_values(const std::vector<std::string>& names) {
  if (!connected()) return fail(Errc::unavailable, "not connected to Redis");
  std::vector<Command> reads;
  for (const auto& name : names) reads.push_back(Command{"CONFIG", "GET", name});
  auto replies = connection_->pipeline(reads);
  if (!replies) return std::unexpected(replies.error());
  std::vector<std::optional<std::string>> values;
  for (const auto& reply : *replies) {
    const redisReply* r = reply.get();
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) values.push_back(str(r->element[1]));
    else values.push_back(std::nullopt);
  }
  return values;
}

Result<void> Store::check_durability_settings() {
  auto values = config_values({"appendonly", "maxmemory-policy"});
  if (!values) return std::unexpected(values.error());
  const auto& appendonly = (*values)[0];
  const auto& policy = (*values)[1];
  if (!appendonly || !policy)
    return fail(Errc::unavailable,
                "cannot read Redis settings with CONFIG GET (is the command renamed or disabled?); "
                "check appendonly=yes and maxmemory-policy=noeviction by hand and start with --allow-unsafe-redis");
  if (*appendonly != "yes")
    return fail(Errc::bad_argument,
                "Redis has appendonly=" + *appendonly +
                    ": accepted jobs would be lost on a restart. Set 'appendonly yes' and 'appendfsync everysec' "
                    "in redis.conf (or CONFIG SET appendonly yes), or pass --allow-unsafe-redis for development");
  if (*policy != "noeviction")
    return fail(Errc::bad_argument,
                "Redis has maxmemory-policy=" + *policy +
                    ": Redis may evict jobs under memory pressure. Set 'maxmemory-policy noeviction' in redis.conf, "
                    "or pass --allow-unsafe-redis for development");
  return {};
}

Result<std::string> Store::settings_advice() {
  struct Wanted {
    const char* name;
    int64_t value;
    const char* cost;
  };
  static constexpr const char* kMemory = "scheduled jobs will use more Redis memory than they need";
  static constexpr const char* kRewrites =
      "under load AOF rewrites (a fork and a full write of the dataset) come every few seconds";
  static constexpr std::array<Wanted, 4> kWanted = {{{"hash-max-listpack-value", 1024, kMemory},
                                                     {"hash-max-listpack-entries", 256, kMemory},
                                                     {"zset-max-listpack-entries", 256, kMemory},
                                                     {"auto-aof-rewrite-min-size", int64_t{1} << 30, kRewrites}}};
  std::vector<std::string> names;
  for (const auto& w : kWanted) names.emplace_back(w.name);
  auto values = config_values(names);
  if (!values) return std::unexpected(values.error());
  std::string advice;
  for (const char* cost : {kMemory, kRewrites}) {
    std::string low;
    for (size_t i = 0; i < kWanted.size(); ++i) {
      if (kWanted[i].cost != cost || !(*values)[i]) continue;  // CONFIG disabled: nothing to say
      if (const int64_t have = std::strtoll((*values)[i]->c_str(), nullptr, 10); have < kWanted[i].value)
        low += fmt::format("{}{} is {} (recommended: {})", low.empty() ? "" : ", ", kWanted[i].name, have, kWanted[i].value);
    }
    if (!low.empty()) advice += fmt::format("{}{}: {}", advice.empty() ? "" : "; ", low, cost);
  }
  if (!advice.empty()) advice += " (see deploy/redis.conf)";
  return advice;
}

Command Store::build(const Round& round, size_t index) const {
  const auto& script = round.scripts_[index];
  if (!script) return round.commands_[index];
  const auto& keys = round.keys_[index];
  Command cmd{"EVALSHA", shas_[static_cast<size_t>(*script)], std::to_string(keys.size())};
  for (const auto& key : keys) cmd.add(key);
  for (const auto& arg : round.commands_[index].args()) cmd.add(arg);
  return cmd;
}

Result<void> Store::send(const Round& round) {
  if (!connected()) return fail(Errc::unavailable, "not connected to Redis");
  OutstandingRound sent;
  sent.commands.reserve(round.size());
  for (size_t i = 0; i < round.size(); ++i) sent.commands.push_back(build(round, i));
  if (auto ok = connection_->send(sent.commands); !ok) {
    disconnect();
    return ok;
  }
  outstanding_.push_back(std::move(sent));
  return {};
}

Result<std::vector<ReplyPtr>> Store::receive() {
  if (!connected()) return fail(Errc::unavailable, "not connected to Redis");
  if (outstanding_.empty()) return fail(Errc::internal, "no round is waiting for replies");
  auto& oldest = outstanding_.front();
  if (!oldest.replies) {
    auto replies = connection_->receive(oldest.commands.size());
    if (!replies) {
      disconnect();
      return replies;
    }
    oldest.replies = std::move(*replies);
  }
  if (std::any_of(oldest.replies->begin(), oldest.replies->end(), [](const ReplyPtr& r) { return is_noscript(r.get()); }))
    if (auto ok = recover_lost_scripts(); !ok) {
      disconnect();
      return std::unexpected(ok.error());
    }
  auto out = std::move(*outstanding_.front().replies);
  outstanding_.pop_front();
  return out;
}

Result<void> Store::recover_lost_scripts() {
  // Rounds sent later are already on the wire: read them before anything new.
  for (auto& round : outstanding_)
    if (!round.replies) {
      auto replies = connection_->receive(round.commands.size());
      if (!replies) return std::unexpected(replies.error());
      round.replies = std::move(*replies);
    }
  if (auto ok = load_scripts(); !ok) return ok;
  // A refused script did nothing, so sending it again now is safe.
  for (auto& round : outstanding_) {
    std::vector<size_t> lost;
    for (size_t i = 0; i < round.replies->size(); ++i)
      if (is_noscript((*round.replies)[i].get())) lost.push_back(i);
    if (lost.empty()) continue;
    std::vector<Command> again;
    for (size_t i : lost) again.push_back(round.commands[i]);
    auto retried = connection_->pipeline(again);
    if (!retried) return std::unexpected(retried.error());
    for (size_t j = 0; j < lost.size(); ++j) (*round.replies)[lost[j]] = std::move((*retried)[j]);
  }
  return {};
}

Result<std::vector<ReplyPtr>> Store::execute(const Round& round) {
  if (!outstanding_.empty()) return fail(Errc::internal, "execute while pipelined rounds are outstanding");
  if (auto ok = send(round); !ok) return std::unexpected(ok.error());
  return receive();
}

Result<std::vector<std::string>> Store::known_queues() {
  if (!connected()) return fail(Errc::unavailable, "not connected to Redis");
  auto reply = connection_->run(Command{"SMEMBERS", kQueuesKey});
  if (!reply) return std::unexpected(reply.error());
  const redisReply* r = reply->get();
  if (r->type != REDIS_REPLY_ARRAY) return bad_reply(r, "SMEMBERS");
  std::vector<std::string> out;
  for (size_t i = 0; i < r->elements; ++i) out.push_back(str(r->element[i]));
  return out;
}

Result<std::map<std::string, std::string>> Store::job_fields(const std::string& queue, const std::string& id) {
  Round round;
  round.show(queue, id);
  auto replies = execute(round);
  if (!replies) return std::unexpected(replies.error());
  return parse_show((*replies)[0].get());
}

Result<std::pair<std::string, std::vector<std::string>>> Store::scan_hash_ids(const std::string& hash_key,
                                                                               const std::string& cursor) {
  Round round;
  round.scan_ids(hash_key, cursor, 1000);
  auto replies = execute(round);
  if (!replies) return std::unexpected(replies.error());
  const redisReply* r = (*replies)[0].get();
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_ARRAY)
    return bad_reply(r, "scan_ids");
  auto ids = parse_strings(r->element[1]);
  if (!ids) return std::unexpected(ids.error());
  return std::make_pair(str(r->element[0]), std::move(*ids));
}

Result<std::vector<std::string>> Store::range_ids(const std::string& key, int64_t start, int64_t count) {
  if (!connected()) return fail(Errc::unavailable, "not connected to Redis");
  auto reply = connection_->run(Command{"ZRANGE", key, std::to_string(start), std::to_string(start + count - 1)});
  if (!reply) return std::unexpected(reply.error());
  return parse_strings(reply->get());
}

Result<std::vector<FilterBucket>> Store::check_schedule_filter(const std::string& queue, const std::string& filter_key,
                                                               bool set) {
  // About 20 µs of Redis per partition at a million scheduled jobs (its ids
  // and its 100 counters; 4 µs when empty): 32 keep a call near 0.6 ms, so
  // the rounds of other queues barely wait behind it.
  constexpr uint32_t kPartitionsPerCall = 32;
  std::vector<FilterBucket> wrong;
  for (uint32_t first = 0; first < kSchedulePartitions; first += kPartitionsPerCall) {
    std::vector<uint32_t> partitions;
    for (uint32_t p = first; p < std::min(kSchedulePartitions, first + kPartitionsPerCall); ++p) partitions.push_back(p);
    Round round;
    round.filter_check(queue, filter_key, set, partitions);
    auto replies = execute(round);
    if (!replies) return std::unexpected(replies.error());
    auto some = parse_filter_check((*replies)[0].get());
    if (!some) return std::unexpected(some.error());
    wrong.insert(wrong.end(), some->begin(), some->end());
  }
  return wrong;
}

Result<bool> Store::build_missing_schedule_filter(const std::string& queue) {
  if (!connected()) return fail(Errc::unavailable, "not connected to Redis");
  const QueueKeys keys(queue);
  auto counts = connection_->pipeline({Command{"EXISTS", keys.schedule_filter}, Command{"ZCARD", keys.schedule}});
  if (!counts) return std::unexpected(counts.error());
  for (const auto& reply : *counts)
    if (reply->type != REDIS_REPLY_INTEGER) return bad_reply(reply.get(), "EXISTS/ZCARD");
  const bool has_filter = (*counts)[0]->integer != 0, has_schedule = (*counts)[1]->integer != 0;
  if (has_filter || !has_schedule) return false;
  // Built aside and renamed into place, so a broker stopped halfway leaves
  // no partial filter behind for the next one to trust.
  const std::string building = keys.schedule_filter + ":building";
  if (auto ok = connection_->run(Command{"DEL", building}); !ok) return std::unexpected(ok.error());
  auto built = check_schedule_filter(queue, building, true);
  if (!built) return std::unexpected(built.error());
  // No counter is written when every partition is empty: nothing to rename.
  if (built->empty()) return false;
  auto renamed = connection_->run(Command{"RENAME", building, keys.schedule_filter});
  if (!renamed) return std::unexpected(renamed.error());
  if ((*renamed)->type == REDIS_REPLY_ERROR) return bad_reply(renamed->get(), "RENAME");
  return true;
}

Result<int64_t> Store::migrate_legacy_schedule(const std::string& queue) {
  const QueueKeys keys(queue);
  int64_t moved = 0;
  while (true) {
    // Each call removes the ids it was given from the old set, so this ends.
    auto ids = range_ids(keys.legacy_scheduled, 0, 500);
    if (!ids) return std::unexpected(ids.error());
    if (ids->empty()) return moved;
    Round round;
    round.migrate_schedule(queue, *ids);
    auto replies = execute(round);
    if (!replies) return std::unexpected(replies.error());
    const redisReply* r = (*replies)[0].get();
    if (r->type != REDIS_REPLY_INTEGER) return bad_reply(r, "migrate_schedule");
    moved += r->integer;
  }
}

Result<std::vector<std::map<std::string, std::string>>> Store::dead_jobs(const std::string& queue, int64_t limit) {
  if (!connected()) return fail(Errc::unavailable, "not connected to Redis");
  auto ids = range_ids(QueueKeys(queue).dead, 0, limit);
  if (!ids) return std::unexpected(ids.error());
  std::vector<std::map<std::string, std::string>> rows;
  if (ids->empty()) return rows;
  Round round;
  for (const auto& id : *ids) round.show(queue, id);
  auto replies = execute(round);
  if (!replies) return std::unexpected(replies.error());
  for (size_t i = 0; i < ids->size(); ++i) {
    auto row = parse_show((*replies)[i].get());
    if (!row) return std::unexpected(row.error());
    if (row->empty()) continue;  // purged or replayed since the range was read
    (*row)["id"] = (*ids)[i];
    (*row)["queue"] = queue;
    (*row)["died_ms"] = (*row)["f"];
    rows.push_back(std::move(*row));
  }
  return rows;
}

Result<std::vector<int64_t>> Store::parse_integers(const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY) return bad_reply(r, "script");
  std::vector<int64_t> out;
  out.reserve(r->elements);
  for (size_t i = 0; i < r->elements; ++i) out.push_back(num(r->element[i]));
  return out;
}

Result<std::vector<LeasedJob>> Store::parse_lease(const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements % 4 != 0) return bad_reply(r, "lease");
  std::vector<LeasedJob> out;
  out.reserve(r->elements / 4);
  for (size_t i = 0; i < r->elements; i += 4) {
    redisReply** e = r->element + i;
    if (e[1]->type != REDIS_REPLY_STRING) return bad_reply(r, "lease");
    auto record = decode_job_record(std::string_view(e[1]->str, e[1]->len));
    if (!record) return fail(Errc::internal, fmt::format("lease: job {}: {}", str(e[0]), record.error().message));
    out.push_back(LeasedJob{str(e[0]), std::move(*record), static_cast<uint32_t>(num(e[2])),
                            static_cast<uint64_t>(num(e[3]))});
  }
  return out;
}

Result<std::map<std::string, std::string>> Store::parse_show(const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 8) return bad_reply(r, "show");
  std::map<std::string, std::string> out;
  const std::string state = str(r->element[0]);
  if (state.empty()) return out;
  out["s"] = state;
  if (state == "dead" || state == "done" || state == "cancelled") out["f"] = str(r->element[1]);
  if (const std::string bytes = str(r->element[2]); !bytes.empty()) {
    auto record = decode_job_record(bytes);
    if (!record) return std::unexpected(record.error());
    out["t"] = record->type;
    out["p"] = record->payload;
    out["d"] = std::to_string(record->due_ms);
    out["m"] = std::to_string(record->max_attempts);
    out["c"] = std::to_string(record->created_ms);
    if (record->backoff_base_ms != 0) out["bb"] = std::to_string(record->backoff_base_ms);
    if (record->backoff_cap_ms != 0) out["bc"] = std::to_string(record->backoff_cap_ms);
  }
  std::string attempts = str(r->element[3]);
  out["a"] = attempts.empty() ? std::string("0") : std::move(attempts);
  if (auto token = str(r->element[4]); !token.empty()) out["k"] = token;
  if (auto e = str(r->element[5]); !e.empty()) out["e"] = e;
  if (auto el = str(r->element[6]); !el.empty()) out["el"] = el;
  if (str(r->element[7]) == "1") out["cx"] = "1";
  return out;
}

Result<std::vector<NackOutcome>> Store::parse_nack(const redisReply* r) {
  auto values = parse_integers(r);
  if (!values) return std::unexpected(values.error());
  if (values->size() % 2 != 0) return bad_reply(r, "nack");
  std::vector<NackOutcome> out;
  for (size_t i = 0; i < values->size(); i += 2) out.push_back({static_cast<int>((*values)[i]), (*values)[i + 1]});
  return out;
}

Result<PromoteOutcome> Store::parse_promote(const redisReply* r) {
  auto values = parse_integers(r);
  if (!values || values->size() != 2) return bad_reply(r, "promote");
  return PromoteOutcome{(*values)[0], (*values)[1]};
}

Result<ReclaimOutcome> Store::parse_reclaim(const redisReply* r) {
  auto values = parse_integers(r);
  if (!values || values->size() != 3) return bad_reply(r, "reclaim");
  return ReclaimOutcome{(*values)[0], (*values)[1], (*values)[2]};
}

Result<proto::QueueStats> Store::parse_stats(const std::string& queue, const redisReply* r) {
  auto v = parse_integers(r);
  if (!v || v->size() != 11) return bad_reply(r, "stats");
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
  return s;
}

Result<std::vector<std::string>> Store::parse_strings(const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY) return bad_reply(r, "script");
  std::vector<std::string> out;
  for (size_t i = 0; i < r->elements; ++i) out.push_back(str(r->element[i]));
  return out;
}

Result<std::vector<FilterBucket>> Store::parse_filter_check(const redisReply* r) {
  auto values = parse_integers(r);
  if (!values) return std::unexpected(values.error());
  if (values->size() % 4 != 0) return bad_reply(r, "filter_check");
  std::vector<FilterBucket> out;
  for (size_t i = 0; i < values->size(); i += 4)
    out.push_back({(*values)[i], (*values)[i + 1], (*values)[i + 2], (*values)[i + 3]});
  return out;
}

Result<AuditSlice> Store::parse_audit(const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_ARRAY ||
      (r->element[0]->elements != 8 && r->element[0]->elements != 0) || r->element[1]->type != REDIS_REPLY_ARRAY)
    return bad_reply(r, "audit");
  AuditSlice slice;
  auto c = [&](size_t i) { return num(r->element[0]->element[i]); };
  if (r->element[0]->elements == 8) slice.counts = AuditCounts{c(0), c(1), c(2), c(3), c(4), c(5), c(6), c(7)};
  const redisReply* p = r->element[1];
  for (size_t i = 0; i + 1 < p->elements; i += 2) slice.problems.emplace_back(str(p->element[i]), str(p->element[i + 1]));
  return slice;
}

Result<CancelOutcome> Store::parse_cancel(const redisReply* r) {
  auto v = parse_integers(r);
  if (!v || v->size() != 2) return bad_reply(r, "cancel");
  return CancelOutcome{static_cast<int>((*v)[0]), static_cast<uint64_t>((*v)[1])};
}

}  // namespace dueq::broker
