#include "broker/admin/admin_commands.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include "broker/admin/auditor.hpp"
#include "broker/loop/enqueuer.hpp"
#include "broker/admin/job_lookup.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"
#include "common/logging.hpp"
#include "common/names.hpp"

namespace dueq::broker {

namespace {
constexpr int kBulkStep = 1000;        // jobs per replay/purge call
constexpr int64_t kDeadListMax = 10'000;
constexpr size_t kDeadListReplyBytes = size_t{4} << 20;
}  // namespace

namespace calls {

Command cancel(const std::string& queue, int64_t now_ms, const std::string& id, int64_t retention_s, bool keep_history) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::cancel, {k.schedule, k.ready, k.leased, k.dead, k.done, k.cancelled, k.stats, k.jobs,
                                             k.tokens, k.attempts, k.errors, k.error_logs, k.cancel_requested, k.unconfirmed,
                                             k.history, k.key_held, k.key_running, k.key_parked, k.unique, k.snoozes})
      .add(now_ms)
      .add(id)
      .add(retention_s)
      .add(static_cast<int64_t>(schedule_partition(id)))
      .add(keep_history ? "1" : "0");
}

Result<CancelOutcome> parse_cancel(const redisReply* r) {
  static constexpr std::array kKnown{CancelStatus::already_finished, CancelStatus::not_found, CancelStatus::cancelled,
                                     CancelStatus::cancel_requested};
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER)
    return reply::bad(r, "cancel");
  const auto known = reply::code(r->element[0]->integer, kKnown);
  if (!known) return reply::bad(r, "cancel");
  if (*known != CancelStatus::cancel_requested) return CancelOutcome{*known, 0};
  auto token = token_from_text(reply::str(r->element[1]));
  if (!token) return reply::bad(r, "cancel");
  return CancelOutcome{*known, *token};
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
  Command call = script_call(lua::ScriptId::reschedule, {k.schedule, k.ready, k.stats, k.jobs})
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

Result<void> await_replicas(RedisClient& redis, const BrokerConfig& config) {
  if (config.min_replicas == 0) return {};
  auto r = redis.call(Command{"WAIT", std::to_string(config.min_replicas), std::to_string(config.replica_timeout_ms)});
  if (!r) return std::unexpected(r.error());
  const redisReply* acked = r->get();
  if (acked->type == REDIS_REPLY_INTEGER && acked->integer >= config.min_replicas) return {};
  return fail(Errc::unavailable,
              fmt::format("the change was made on the Redis master, but {} of the {} replicas min_replicas asks for took it "
                          "within {} ms: a fail-over may undo it; look at it again and retry",
                          acked->type == REDIS_REPLY_INTEGER ? acked->integer : 0, config.min_replicas,
                          config.replica_timeout_ms));
}

Result<std::optional<int64_t>> integer_arg(const proto::AdminRequest& request, const char* name, int64_t lo, int64_t hi) {
  const auto it = request.args.find(name);
  if (it == request.args.end()) return std::nullopt;
  const std::string& t = it->second;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || v < lo || v > hi)
    return fail(Errc::bad_argument, fmt::format("{}: a whole number in {}..{}", name, lo, hi));
  return v;
}

std::string DeadListCursor::text() const { return queue + ":" + std::to_string(rank); }

Result<DeadListCursor> DeadListCursor::parse(std::string_view text) {
  if (text.empty()) return DeadListCursor{};
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || !validate_queue_name(text.substr(0, colon)))
    return fail(Errc::bad_argument, "after: not a cursor this broker gave (the `next` of an earlier page)");
  DeadListCursor cursor{std::string(text.substr(0, colon)), 0};
  const std::string_view rank = text.substr(colon + 1);
  const auto [end, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), cursor.rank);
  if (rank.empty() || ec != std::errc() || end != rank.data() + rank.size() || cursor.rank < 0)
    return fail(Errc::bad_argument, "after: not a cursor this broker gave (the `next` of an earlier page)");
  return cursor;
}

namespace {

// A script call whose error reply fails the command.
Result<ReplyPtr> run(AdminContext& c, Command call) {
  auto r = c.redis.call(std::move(call));
  if (!r) return r;
  if (auto err = reply_error(r->get()); !err.empty()) return fail(Errc::internal, std::string(err));
  return r;
}

}  // namespace

// Every id is looked up before any is cancelled: an ambiguous one fails
// the request and changes nothing.
Result<proto::AdminReply> cancel_jobs(AdminContext& c, const proto::AdminRequest& request) {
  proto::AdminReply reply;
  std::vector<std::optional<std::string>> queue_of;
  for (const auto& id : request.ids) {
    auto queue_name = find_job_queue(c.redis, id, request.queue);
    if (!queue_name && queue_name.error().code != Errc::not_found) return std::unexpected(queue_name.error());
    queue_of.push_back(queue_name ? std::optional(*queue_name) : std::nullopt);
  }
  for (size_t i = 0; i < request.ids.size(); ++i) {
    const std::string& id = request.ids[i];
    std::map<std::string, std::string> row{{"id", id}};
    const auto& queue_name = queue_of[i];
    if (!queue_name) {
      row["result"] = "not found";
      reply.rows.push_back(std::move(row));
      continue;
    }
    row["queue"] = *queue_name;
    auto r = run(c, calls::cancel(*queue_name, c.now_ms, id, c.config.policy(*queue_name).done_retention_s,
                                  c.config.policy(*queue_name).keeps_history()));
    if (!r) return std::unexpected(r.error());
    auto outcome = calls::parse_cancel(r->get());
    if (!outcome) return std::unexpected(outcome.error());
    switch (outcome->status) {
      case CancelStatus::cancelled:
        row["result"] = "cancelled";
        // It may have held its key's turn (an ordered queue's retry): the
        // key's next job was put back in line, and the loop leases again.
        c.effects.ready_queues.push_back(*queue_name);
        break;
      case CancelStatus::cancel_requested:
        row["result"] = "cancelling: it is running; its worker was told to stop";
        c.effects.stop_running.push_back({*queue_name, id, outcome->token});
        break;
      case CancelStatus::already_finished: row["result"] = "already finished"; break;
      case CancelStatus::not_found: row["result"] = "not found"; break;
    }
    reply.rows.push_back(std::move(row));
  }
  return reply;
}

std::map<std::string, std::string> listed_row(std::map<std::string, std::string>&& fields) {
  for (const char* big : {"p", "el"}) {
    if (auto it = fields.find(big); it != fields.end()) {
      fields[std::string(big) + "_bytes"] = std::to_string(it->second.size());
      fields.erase(it);
    }
  }
  return std::move(fields);
}

namespace {

size_t row_bytes(const std::map<std::string, std::string>& row) {
  size_t n = 0;
  for (const auto& [k, v] : row) n += k.size() + v.size() + 4;
  return n;
}

}  // namespace

namespace {

// One queue's dead letters from rank `from` into `reply`, until it holds
// `limit` rows or `bytes` passes kDeadListReplyBytes. Returns the rank to go
// on from in that queue, or nullopt when it was listed to its end.
Result<std::optional<int64_t>> list_dead_of(AdminContext& c, const std::string& name, int64_t from, int64_t limit,
                                            size_t& bytes, proto::AdminReply& reply) {
  const int64_t room = limit - static_cast<int64_t>(reply.rows.size());
  auto r = c.redis.call(Command{"ZRANGE", QueueKeys(name).dead, std::to_string(from), std::to_string(from + room - 1)});
  if (!r) return std::unexpected(r.error());
  auto ids = reply::strings(r->get(), "ZRANGE");
  if (!ids) return std::unexpected(ids.error());
  // Bounded steps: 100 lookups per round trip.
  for (size_t i = 0; i < ids->size(); i += 100) {
    std::vector<Command> shows;
    for (size_t j = i; j < std::min(ids->size(), i + 100); ++j) shows.push_back(calls::show(name, (*ids)[j]));
    auto replies = c.redis.pipeline(std::move(shows));
    if (!replies) return std::unexpected(replies.error());
    for (size_t j = 0; j < replies->size(); ++j) {
      auto row = calls::parse_show((*replies)[j].get());
      if (!row) return std::unexpected(row.error());
      if (row->empty()) continue;  // purged or replayed since the range was read
      (*row)["id"] = (*ids)[i + j];
      (*row)["queue"] = name;
      (*row)["died_ms"] = (*row)["f"];
      auto listed = listed_row(std::move(*row));
      bytes += row_bytes(listed);
      // The first row of a page always goes: a page moves on.
      if (bytes > kDeadListReplyBytes && !reply.rows.empty()) return from + static_cast<int64_t>(i + j);
      reply.rows.push_back(std::move(listed));
    }
  }
  if (static_cast<int64_t>(ids->size()) == room) return from + room;  // maybe more
  return std::nullopt;
}

}  // namespace

// At most `limit` rows in all (across queues, in name order) and
// kDeadListReplyBytes of them: a request for every queue's dead letters
// costs a bounded reply. `args["after"]` goes on where an earlier page
// stopped; the reply's `next` says where this one did ("" at the end).
Result<proto::AdminReply> list_dead(AdminContext& c, const proto::AdminRequest& request) {
  const int64_t limit = request.limit == 0 ? 1000 : std::min<int64_t>(request.limit, kDeadListMax);
  const auto after = request.args.find("after");
  auto cursor = DeadListCursor::parse(after == request.args.end() ? "" : after->second);
  if (!cursor) return std::unexpected(cursor.error());
  auto names = queues_for(c.redis, request.queue);
  if (!names) return std::unexpected(names.error());
  std::sort(names->begin(), names->end());
  proto::AdminReply reply;
  size_t bytes = 0;
  for (auto it = std::lower_bound(names->begin(), names->end(), cursor->queue); it != names->end(); ++it) {
    const int64_t from = *it == cursor->queue ? cursor->rank : 0;
    auto stopped = list_dead_of(c, *it, from, limit, bytes, reply);
    if (!stopped) return std::unexpected(stopped.error());
    if (*stopped) {
      reply.next = DeadListCursor{*it, **stopped}.text();
      reply.summary = fmt::format("{} dead jobs; more after this page (a page stops at {} rows or {} KiB)",
                                  reply.rows.size(), limit, kDeadListReplyBytes / 1024);
      break;
    }
  }
  return reply;
}

// The next `limit` (at most 100) jobs of one queue's schedule by due time.
// The schedule index holds a lower bound of each partition's earliest due
// time; partitions are read in that order, 64 a round trip, until the next
// one's bound is past the last job found (then the list is exact) or 1,024
// partitions were read (then the summary says it may not be).
Result<proto::AdminReply> list_scheduled(AdminContext& c, const proto::AdminRequest& request) {
  if (request.queue.empty()) return fail(Errc::bad_argument, "scheduled needs a queue");
  const size_t limit = request.limit == 0 ? 20 : std::min<size_t>(request.limit, 100);
  constexpr size_t kPartitionsPerStep = 64, kMaxPartitions = 1'024;
  const QueueKeys k(request.queue);
  std::vector<std::pair<int64_t, std::string>> found;  // (due ms, id), sorted, at most `limit`
  bool exact = false;
  for (size_t from = 0; from < kMaxPartitions && !exact; from += kPartitionsPerStep) {
    auto index = c.redis.call(Command{"ZRANGE", k.schedule, std::to_string(from),
                                      std::to_string(from + kPartitionsPerStep - 1), "WITHSCORES"});
    if (!index) return std::unexpected(index.error());
    auto pairs = reply::strings(index->get(), "ZRANGE");
    if (!pairs) return std::unexpected(pairs.error());
    if (pairs->empty()) {
      exact = true;
      break;
    }
    std::vector<Command> reads;
    std::vector<int64_t> bounds;
    for (size_t i = 0; i + 1 < pairs->size(); i += 2) {
      reads.push_back(Command{"ZRANGE", k.schedule + ":" + (*pairs)[i], "0", std::to_string(limit - 1), "WITHSCORES"});
      bounds.push_back(std::stoll((*pairs)[i + 1]));
    }
    auto replies = c.redis.pipeline(std::move(reads));
    if (!replies) return std::unexpected(replies.error());
    for (size_t p = 0; p < replies->size(); ++p) {
      // Every partition from here on starts at or after this bound.
      if (found.size() == limit && found.back().first <= bounds[p]) {
        exact = true;
        break;
      }
      auto jobs = reply::strings((*replies)[p].get(), "ZRANGE");
      if (!jobs) return std::unexpected(jobs.error());
      for (size_t j = 0; j + 1 < jobs->size(); j += 2) found.emplace_back(std::stoll((*jobs)[j + 1]), (*jobs)[j]);
      std::sort(found.begin(), found.end());
      if (found.size() > limit) found.resize(limit);
    }
    if (pairs->size() < 2 * kPartitionsPerStep) exact = true;
  }
  std::vector<Command> shows;
  shows.reserve(found.size());
  for (const auto& [due, id] : found) shows.push_back(calls::show(request.queue, id));
  auto replies = c.redis.pipeline(std::move(shows));
  if (!replies) return std::unexpected(replies.error());
  proto::AdminReply reply;
  for (size_t i = 0; i < found.size(); ++i) {
    auto row = calls::parse_show((*replies)[i].get());
    if (!row) return std::unexpected(row.error());
    if (row->empty()) continue;  // promoted or cancelled since
    (*row)["id"] = found[i].second;
    (*row)["queue"] = request.queue;
    reply.rows.push_back(std::move(*row));
  }
  reply.summary = exact ? "exact" : "the first 1,024 partitions read: later jobs may be missing";
  return reply;
}

Result<proto::AdminReply> replay_or_purge(AdminContext& c, const proto::AdminRequest& request, bool replay) {
  proto::AdminReply reply;
  size_t changed = 0;
  auto apply = [&](Command call, const std::string& name) -> Result<size_t> {
    auto r = run(c, std::move(call));
    if (!r) return std::unexpected(r.error());
    auto ids = reply::strings(r->get(), replay ? "replay" : "purge");
    if (!ids) return std::unexpected(ids.error());
    for (const auto& id : *ids) reply.rows.push_back({{"id", id}, {"queue", name}});
    changed += ids->size();
    if (replay && !ids->empty()) c.effects.ready_queues.push_back(name);
    return ids->size();
  };
  if (request.ids.empty()) {
    if (replay && request.queue.empty()) return fail(Errc::bad_argument, "replaying every dead job needs a queue");
    if (!replay && request.older_than_ms <= 0) return fail(Errc::bad_argument, "purge needs ids or an age");
    auto names = queues_for(c.redis, request.queue);
    if (!names) return std::unexpected(names.error());
    for (const auto& name : *names) {
      while (true) {
        auto n = apply(replay ? calls::replay_oldest(name, c.now_ms, kBulkStep)
                              : calls::purge_dead_before(name, c.now_ms - request.older_than_ms, kBulkStep),
                       name);
        if (!n) return std::unexpected(n.error());
        if (*n < static_cast<size_t>(kBulkStep)) break;
      }
    }
  } else {
    std::map<std::string, std::vector<std::string>> by_queue;
    for (const auto& id : request.ids) {
      auto name = find_job_queue(c.redis, id, request.queue);
      if (name) by_queue[*name].push_back(id);
      else if (name.error().code != Errc::not_found) return std::unexpected(name.error());
    }
    for (const auto& [name, ids] : by_queue)
      if (auto n = apply(replay ? calls::replay(name, c.now_ms, ids) : calls::purge(name, ids), name); !n)
        return std::unexpected(n.error());
  }
  reply.summary = fmt::format("{} {}", changed, replay ? "replayed" : "purged");
  return reply;
}

Result<proto::AdminReply> audit_queues(AdminContext& c, const proto::AdminRequest& request) {
  proto::AdminReply reply;
  size_t violations = 0;
  auto names = queues_for(c.redis, request.queue);
  if (!names) return std::unexpected(names.error());
  for (const auto& name : *names) {
    auto report = audit_queue(c.redis, name, /*repair=*/false);
    if (!report) return std::unexpected(report.error());
    const auto& counts = report->counts;
    reply.rows.push_back({{"queue", name}, {"accepted", std::to_string(counts.accepted)}, {"done", std::to_string(counts.done)},
                          {"cancelled", std::to_string(counts.cancelled)}, {"purged", std::to_string(counts.purged)},
                          {"dead", std::to_string(counts.dead)}, {"scheduled", std::to_string(counts.scheduled)},
                          {"ready", std::to_string(counts.ready)}, {"leased", std::to_string(counts.leased)},
                          {"imbalance", std::to_string(counts.imbalance())}});
    if (counts.imbalance() != 0) ++violations;
    for (const auto& [id, what] : report->problems) {
      reply.rows.push_back({{"queue", name}, {"id", id}, {"problem", what}});
      ++violations;
    }
  }
  reply.summary = violations == 0 ? "clean" : fmt::format("{} violations", violations);
  return reply;
}

// Pauses or resumes one queue; the loop applies it to its own state once
// Redis holds it (AdminEffects).
Result<proto::AdminReply> pause_or_resume(AdminContext& c, const proto::AdminRequest& request, bool pause) {
  if (auto valid = validate_queue_name(request.queue); !valid) return std::unexpected(valid.error());
  const auto create = request.args.find("create");
  if (create != request.args.end() && create->second != "1")
    return fail(Errc::bad_argument, "args.create is \"1\" or absent");
  // A typo (dueq pause emials) would otherwise make a queue nothing uses.
  if (create == request.args.end()) {
    auto known = c.redis.call(Command{"SISMEMBER", kQueuesKey, request.queue});
    if (!known) return std::unexpected(known.error());
    if (auto err = reply_error(known->get()); !err.empty()) return fail(Errc::internal, "SISMEMBER: " + std::string(err));
    if ((*known)->type != REDIS_REPLY_INTEGER || (*known)->integer != 1)
      return fail(Errc::not_found, fmt::format("no queue '{}': no job was ever enqueued into it{}", loggable(request.queue),
                                               pause ? " (with --create it is paused anyway, and jobs enqueued later wait)"
                                                     : ""));
  }
  auto registered = c.redis.call(calls::register_queue(request.queue));
  if (!registered) return std::unexpected(registered.error());
  if (auto err = reply_error(registered->get()); !err.empty()) return fail(Errc::internal, "register_queue: " + std::string(err));
  auto r = run(c, calls::pause(request.queue, pause, c.now_ms));
  if (!r) return std::unexpected(r.error());
  auto outcome = calls::parse_pause(r->get());
  if (!outcome) return std::unexpected(outcome.error());
  const bool changed = outcome->change == PauseChange::changed;
  const int64_t since = outcome->paused_since_ms;
  (pause ? c.effects.paused_queues : c.effects.resumed_queues).push_back(request.queue);
  proto::AdminReply out;
  out.rows.push_back({{"queue", request.queue}, {"paused", pause ? "yes" : "no"}, {"paused_since_ms", std::to_string(since)}});
  out.summary = fmt::format("queue '{}' {}{}", request.queue, changed ? "" : "was already ",
                            pause ? "paused" : (changed ? "resumed" : "running"));
  return out;
}

}  // namespace dueq::broker
