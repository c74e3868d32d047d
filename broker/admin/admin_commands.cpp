#include "broker/admin/admin_commands.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include "broker/admin/auditor.hpp"
#include "broker/loop/enqueuer.hpp"
#include "broker/admin/job_lookup.hpp"
#include "broker/store/keys.hpp"
#include "common/logging.hpp"
#include "common/names.hpp"

namespace dueq::broker {

namespace {
constexpr int kBulkStep = 1000;  // jobs per replay/purge call
}  // namespace

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
        c.effects.due_at(*queue_name, outcome->released_due_ms);  // a flow parent or batch callback it released
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
