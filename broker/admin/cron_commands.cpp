#include "broker/admin/cron_commands.hpp"

#include <charconv>

#include <fmt/format.h>

#include "broker/loop/cron_scheduler.hpp"
#include "broker/store/keys.hpp"

namespace dueq::broker {

namespace calls {

Command cron_restart(const CronEntry& entry, int64_t now_ms, int64_t lookahead_ms) {
  const QueueKeys k(entry.queue);
  Command call = script_call(lua::ScriptId::cron_restart, {k.cron, k.cancelled});
  call.add(entry.name).add(entry.fingerprint());
  int steps = 0;
  for (auto tick = entry.schedule.next_after(now_ms); tick && *tick <= now_ms + lookahead_ms && steps < 1'000;
       tick = entry.schedule.next_after(*tick), ++steps)
    call.add(cron_tick_id(entry.name, *tick));
  return call;
}

Command cron_retire(const CronEntry& entry) {
  const QueueKeys k(entry.queue);
  return script_call(lua::ScriptId::cron_retire, {k.cron}).add(entry.name);
}

Result<int64_t> parse_cron_retire(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_INTEGER || r->integer < 0) return reply::bad(r, "cron_retire");
  return r->integer;
}

}  // namespace calls

namespace {

std::string arg(const proto::AdminRequest& request, const char* name) {
  auto it = request.args.find(name);
  return it == request.args.end() ? std::string() : it->second;
}

const CronEntry* config_entry(const BrokerConfig& config, const std::string& name) {
  for (const auto& e : config.cron)
    if (e.name == name) return &e;
  return nullptr;
}

Result<std::optional<CronEntry>> stored_entry(RedisClient& redis, const std::string& name) {
  auto r = redis.call(Command{"HGET", kCronEntriesKey, name});
  if (!r) return std::unexpected(r.error());
  if ((*r)->type == REDIS_REPLY_NIL) return std::optional<CronEntry>();
  auto entry = CronEntry::from_json(name, reply::str(r->get()));
  if (!entry) return std::optional<CronEntry>();  // unreadable: replaced or removed like a missing one
  return std::optional<CronEntry>(std::move(*entry));
}

// Ends `entry`'s ticks in its queue (cron_retire.lua) and cancels those
// enqueued ahead that have not come due; answers how many were cancelled.
Result<int64_t> retire(AdminContext& c, const CronEntry& entry) {
  auto r = c.redis.call(calls::cron_retire(entry));
  if (!r) return std::unexpected(r.error());
  if (auto err = reply_error(r->get()); !err.empty()) return fail(Errc::internal, std::string(err));
  auto retired = calls::parse_cron_retire(r->get());
  if (!retired) return std::unexpected(retired.error());
  const int64_t last = *retired;
  int64_t cancelled = 0;
  int steps = 0;
  for (auto tick = entry.schedule.next_after(c.now_ms); tick && *tick <= last && steps < 1'000;
       tick = entry.schedule.next_after(*tick), ++steps) {
    auto done = c.redis.call(calls::cancel(entry.queue, c.now_ms, cron_tick_id(entry.name, *tick),
                                           c.config.policy(entry.queue).done_retention_s,
                                           c.config.policy(entry.queue).keeps_history()));
    if (!done) return std::unexpected(done.error());
    auto outcome = calls::parse_cancel(done->get());
    if (outcome && outcome->status == CancelStatus::cancelled) ++cancelled;
  }
  return cancelled;
}

// A fresh state for `entry`'s new definition in its queue: its ticks start
// after now, and its tick ids within the lookahead are freed where an
// earlier definition's ticks there were cancelled (cron_restart.lua), so
// that replacing an entry, or removing and adding it again, drops no tick.
Result<void> restart(AdminContext& c, const CronEntry& entry) {
  auto r = c.redis.call(calls::cron_restart(entry, c.now_ms, c.config.cron_lookahead_ms));
  if (!r) return std::unexpected(r.error());
  if (auto err = reply_error(r->get()); !err.empty()) return fail(Errc::internal, std::string(err));
  return {};
}

}  // namespace

Result<proto::AdminReply> cron_add(AdminContext& c, const proto::AdminRequest& request) {
  const std::string name = arg(request, "name");
  CronDefinition d{arg(request, "schedule"), arg(request, "time_zone"), arg(request, "queue"), arg(request, "type"),
                   arg(request, "payload"), arg(request, "misfire"), 0};
  if (d.time_zone.empty()) d.time_zone = "UTC";
  if (d.misfire.empty()) d.misfire = "skip";
  if (const std::string attempts = arg(request, "max_attempts"); !attempts.empty()) {
    const auto [end, ec] = std::from_chars(attempts.data(), attempts.data() + attempts.size(), d.max_attempts);
    if (ec != std::errc() || end != attempts.data() + attempts.size())
      return fail(Errc::bad_argument, "max_attempts must be a number 0..1000");
  }
  auto entry = make_cron_entry(name, d);
  if (!entry) return std::unexpected(entry.error());
  if (config_entry(c.config, name) != nullptr)
    return fail(Errc::bad_argument, fmt::format("cron entry '{}' is defined in the broker's config file; change it there", name));
  auto old = stored_entry(c.redis, name);
  if (!old) return std::unexpected(old.error());
  proto::AdminReply reply;
  if (*old && (*old)->fingerprint() == entry->fingerprint() && (*old)->run_missed_once == entry->run_missed_once) {
    reply.summary = fmt::format("cron entry '{}' unchanged", name);
    return reply;
  }
  if (!*old) {
    auto count = c.redis.call(Command{"HLEN", kCronEntriesKey});
    if (!count) return std::unexpected(count.error());
    if (reply::num(count->get()) + static_cast<int64_t>(c.config.cron.size()) >= static_cast<int64_t>(kMaxCronEntries))
      return fail(Errc::bad_argument, fmt::format("at most {} cron entries", kMaxCronEntries));
  }
  int64_t cancelled = 0;
  if (*old) {
    auto retired = retire(c, **old);
    if (!retired) return std::unexpected(retired.error());
    cancelled = *retired;
  }
  if (auto ok = restart(c, *entry); !ok) return std::unexpected(ok.error());
  auto stored = c.redis.call(Command{"HSET", kCronEntriesKey, name, entry->to_json()});
  if (!stored) return std::unexpected(stored.error());
  const auto next = entry->schedule.next_after(c.now_ms);
  reply.rows.push_back({{"name", name}, {"next_ms", std::to_string(next.value_or(0))}});
  reply.summary = fmt::format("cron entry '{}' {}{}", name, *old ? "replaced" : "added",
                              cancelled > 0 ? fmt::format(" ({} ticks of the old one cancelled)", cancelled) : "");
  c.effects.cron_put.push_back(std::move(*entry));
  return reply;
}

Result<proto::AdminReply> cron_remove(AdminContext& c, const proto::AdminRequest& request) {
  const std::string name = arg(request, "name");
  if (config_entry(c.config, name) != nullptr)
    return fail(Errc::bad_argument, fmt::format("cron entry '{}' is defined in the broker's config file; remove it there", name));
  auto old = stored_entry(c.redis, name);
  if (!old) return std::unexpected(old.error());
  if (!*old) return fail(Errc::not_found, fmt::format("no cron entry '{}'", name));
  auto retired = retire(c, **old);
  if (!retired) return std::unexpected(retired.error());
  auto removed = c.redis.call(Command{"HDEL", kCronEntriesKey, name});
  if (!removed) return std::unexpected(removed.error());
  c.effects.cron_removed.push_back(name);
  proto::AdminReply reply;
  reply.summary = fmt::format("cron entry '{}' removed ({} ticks enqueued ahead cancelled)", name, *retired);
  return reply;
}

Result<proto::AdminReply> cron_list(AdminContext& c, const proto::AdminRequest&) {
  std::vector<std::string> problems;
  auto stored = load_stored_cron_entries(c.redis, problems);
  if (!stored) return std::unexpected(stored.error());
  std::vector<const CronEntry*> all;
  all.reserve(c.config.cron.size() + stored->size());
  for (const auto& e : c.config.cron) all.push_back(&e);
  for (const auto& e : *stored)
    if (config_entry(c.config, e.name) == nullptr) all.push_back(&e);
  proto::AdminReply reply;
  for (const CronEntry* e : all) {
    auto last = read_cron_state(c.redis, *e);
    if (!last) return std::unexpected(last.error());
    std::string next;
    int64_t at = c.now_ms;
    for (int i = 0; i < 3; ++i) {
      auto tick = e->schedule.next_after(at);
      if (!tick) break;
      next += (next.empty() ? "" : ",") + std::to_string(*tick);
      at = *tick;
    }
    reply.rows.push_back({{"name", e->name}, {"schedule", e->schedule.expression()}, {"time_zone", e->schedule.time_zone()},
                          {"queue", e->queue}, {"type", e->type}, {"misfire", e->run_missed_once ? "run_once" : "skip"},
                          {"source", e->from_config ? "config" : "added"},
                          {"last_enqueued_ms", std::to_string(last->value_or(0))}, {"next_ms", next}});
  }
  reply.summary = fmt::format("{} cron entries", all.size());
  for (const auto& p : problems) reply.summary += "; " + p;
  return reply;
}

}  // namespace dueq::broker
