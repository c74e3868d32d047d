#include "broker/admin/bulk_actions.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "common/ids.hpp"
#include "common/json_bytes.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

namespace {

constexpr int64_t kMaxDueMs = 253'402'300'799'999;  // 9999-12-31T23:59:59.999Z, exact in a Lua number
constexpr int64_t kMaxSpreadMs = 30LL * 86'400'000;   // 30 days

const std::set<std::string, std::less<>> kFilterArgs{"state", "type", "since", "until", "error", "id_prefix"};
const std::set<std::string, std::less<>> kBulkArgs{"action", "rate", "dry_run", "at_ms", "spread_ms", "state", "type", "since",
                                                    "until", "error", "id_prefix"};

Result<void> check_action(const std::string& action, const ListFilter& f) {
  if (action == "cancel" || action == "reschedule") {
    if (f.state != "scheduled" && f.state != "ready")
      return fail(Errc::bad_argument, action + " takes --state scheduled or ready (a running job: dueq cancel ID)");
    return {};
  }
  if (action == "run_now") {
    if (f.state != "scheduled") return fail(Errc::bad_argument, "run_now takes --state scheduled");
    return {};
  }
  if (action == "replay" || action == "purge") {
    if (f.state != "dead") return fail(Errc::bad_argument, action + " takes --state dead");
    return {};
  }
  return fail(Errc::bad_argument, "action: one of cancel, replay, purge, run_now, reschedule");
}

// The action's rate (jobs a second), for reschedule its new due time, and
// for run_now and reschedule the spread of the due times.
Result<void> read_numbers(const proto::AdminRequest& request, BulkAction& a) {
  auto rate = integer_arg(request, "rate", 1, kMaxBulkRate);
  if (!rate) return fail(Errc::bad_argument, fmt::format("rate: jobs per second, 1..{}", kMaxBulkRate));
  a.rate = rate->value_or(0);
  auto at = integer_arg(request, "at_ms", 0, kMaxDueMs);
  if (!at) return std::unexpected(at.error());
  if (a.action == "reschedule" && !*at)
    return fail(Errc::bad_argument, "reschedule takes at_ms: the new due time, ms since the epoch (0..year 9999)");
  if (a.action != "reschedule" && *at) return fail(Errc::bad_argument, "at_ms: for reschedule only");
  a.due_ms = at->value_or(0);
  auto spread = integer_arg(request, "spread_ms", 0, kMaxSpreadMs);
  if (!spread) return std::unexpected(spread.error());
  if (*spread && a.action != "reschedule" && a.action != "run_now")
    return fail(Errc::bad_argument, "spread_ms: for run_now and reschedule only");
  a.spread_ms = spread->value_or(0);
  return {};
}

Result<ReplyPtr> fenced(RedisClient& redis, Command call) {
  auto r = redis.call(std::move(call));
  if (!r) return r;
  if (auto err = reply_error(r->get()); !err.empty()) return fail(Errc::internal, std::string(err));
  return r;
}

// Applies the action to `ids` of the queue; how many it changed.
Result<int64_t> apply(RedisClient& redis, const BrokerConfig& config, const BulkAction& a, const std::vector<std::string>& ids,
                      int64_t now_ms) {
  if (ids.empty()) return int64_t{0};
  if (a.action == "cancel") {
    std::vector<Command> cancels;
    cancels.reserve(ids.size());
    for (const auto& id : ids) cancels.push_back(calls::cancel(a.queue, now_ms, id, config.policy(a.queue).done_retention_s,
                                                                  config.policy(a.queue).keeps_history()));
    auto replies = redis.pipeline(std::move(cancels));
    if (!replies) return std::unexpected(replies.error());
    int64_t changed = 0;
    for (const auto& r : *replies) {
      if (auto err = reply_error(r.get()); !err.empty()) return fail(Errc::internal, std::string(err));
      auto outcome = calls::parse_cancel(r.get());
      if (!outcome) return std::unexpected(outcome.error());
      if (outcome->status == CancelStatus::cancelled) ++changed;
    }
    return changed;
  }
  if (a.action == "run_now" || a.action == "reschedule") {
    const int64_t due_ms = a.action == "run_now" ? now_ms : a.due_ms;
    auto r = fenced(redis, calls::reschedule(a.queue, now_ms, due_ms, ids, a.spread_ms));
    if (!r) return std::unexpected(r.error());
    auto moved = reply::integers(r->get(), "reschedule");
    if (!moved) return std::unexpected(moved.error());
    return static_cast<int64_t>(std::count(moved->begin(), moved->end(), int64_t{1}));
  }
  auto r = fenced(redis, a.action == "replay" ? calls::replay(a.queue, now_ms, ids) : calls::purge(a.queue, ids));
  if (!r) return std::unexpected(r.error());
  auto moved = reply::strings(r->get(), a.action.c_str());
  if (!moved) return std::unexpected(moved.error());
  return static_cast<int64_t>(moved->size());
}

Result<std::vector<BulkAction>> all_actions(RedisClient& redis) {
  auto r = redis.call(Command{"HVALS", kBulkKey});
  if (!r) return std::unexpected(r.error());
  auto values = reply::strings(r->get(), "HVALS");
  if (!values) return std::unexpected(values.error());
  std::vector<BulkAction> out;
  for (const auto& v : *values)
    if (auto a = BulkAction::from_json(v)) out.push_back(std::move(*a));
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.started_ms > y.started_ms; });
  return out;
}

Result<void> save(RedisClient& redis, const BulkAction& a) {
  auto r = redis.call(Command{"HSET", kBulkKey, a.id, a.to_json()});
  if (!r) return std::unexpected(r.error());
  return {};
}

std::map<std::string, std::string> status_row(const BulkAction& a) {
  return {{"id", a.id}, {"queue", a.queue}, {"action", a.action}, {"filter", a.filter_text()}, {"rate", std::to_string(a.rate)},
          {"due_ms", std::to_string(a.action == "reschedule" ? a.due_ms : 0)}, {"spread_ms", std::to_string(a.spread_ms)},
          {"status", a.status}, {"changed", std::to_string(a.changed)}, {"key", a.requester},
          {"started_ms", std::to_string(a.started_ms)}, {"finished_ms", std::to_string(a.finished_ms)},
          {"cursor", a.cursor}, {"error", a.error}};
}

}  // namespace

std::string BulkAction::to_json() const {
  nlohmann::json j{{"id", id}, {"queue", queue}, {"action", action}, {"filter", bytes_json(filter)}, {"rate", rate}, {"due_ms", due_ms}, {"spread_ms", spread_ms},
                   {"requester", bytes_json(requester)}, {"status", status}, {"cursor", bytes_json(cursor)},
                   {"changed", changed}, {"started_ms", started_ms}, {"finished_ms", finished_ms}, {"error", bytes_json(error)}};
  return dump_json(j);
}

Result<BulkAction> BulkAction::from_json(std::string_view text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(Errc::internal, "a bulk action record that is not JSON");
  try {
    BulkAction a;
    a.id = j.at("id").get<std::string>();
    a.queue = j.at("queue").get<std::string>();
    a.action = j.at("action").get<std::string>();
    for (const auto& [k, v] : j.at("filter").items()) a.filter[k] = bytes_from_json(v).value_or("");
    a.rate = j.at("rate").get<int64_t>();
    a.due_ms = j.value("due_ms", int64_t{0});  // absent from records before reschedule
    a.spread_ms = j.value("spread_ms", int64_t{0});
    a.requester = bytes_from_json(j.at("requester")).value_or("-");
    a.status = j.at("status").get<std::string>();
    a.cursor = bytes_from_json(j.at("cursor")).value_or("");
    a.changed = j.at("changed").get<int64_t>();
    a.started_ms = j.at("started_ms").get<int64_t>();
    a.finished_ms = j.at("finished_ms").get<int64_t>();
    a.error = bytes_from_json(j.at("error")).value_or("");
    return a;
  } catch (const nlohmann::json::exception& e) {
    return fail(Errc::internal, std::string("a bulk action record with a bad field: ") + e.what());
  }
}

std::string BulkAction::filter_text() const {
  std::string out;
  for (const auto& [k, v] : filter) out += fmt::format("{}{}={}", out.empty() ? "" : " ", k, v);
  return out;
}

Result<proto::AdminReply> bulk_start(AdminContext& c, const proto::AdminRequest& request) {
  for (const auto& [name, value] : request.args)
    if (!kBulkArgs.contains(name)) return fail(Errc::bad_argument, "bulk: no argument " + name);
  BulkAction a;
  a.queue = request.queue;
  a.action = request.args.contains("action") ? request.args.at("action") : "";
  for (const auto& [name, value] : request.args)
    if (kFilterArgs.contains(name)) a.filter[name] = value;
  auto filter = ListFilter::parse(a.filter);
  if (!filter) return std::unexpected(filter.error());
  if (auto ok = check_action(a.action, *filter); !ok) return std::unexpected(ok.error());
  if (auto ok = read_numbers(request, a); !ok) return std::unexpected(ok.error());
  if (auto ok = check_list_queue(c.redis, a.queue); !ok) return std::unexpected(ok.error());
  proto::AdminReply reply;
  if (request.args.contains("dry_run") && request.args.at("dry_run") == "1") {
    // Counted page by page, as the action would go; nothing written.
    int64_t matched = 0;
    std::optional<ListCursor> cursor;
    do {
      auto page = scan_jobs(c.redis, a.queue, *filter, cursor, kListMaxLimit, kListExamined);
      if (!page) return std::unexpected(page.error());
      matched += static_cast<int64_t>(page->rows.rows.size());
      cursor = page->next;
    } while (cursor);
    reply.summary = fmt::format("dry run: {} would {} {} jobs of queue {} ({}); nothing changed", c.requester, a.action, matched,
                                a.queue, a.filter_text());
    reply.rows.push_back({{"matched", std::to_string(matched)}});
    spdlog::info("bulk dry run by key {}: {} in queue {} ({}): {} jobs match", loggable(c.requester), a.action, loggable(a.queue),
                 loggable(a.filter_text(), 512), matched);
    return reply;
  }
  auto kept = all_actions(c.redis);
  if (!kept) return std::unexpected(kept.error());
  if (std::count_if(kept->begin(), kept->end(), [](const auto& k) { return k.status == "running"; }) >= 16)
    return fail(Errc::overloaded, "16 bulk actions are running: wait for one to finish (dueq bulk status)");
  // The oldest finished records make room.
  for (size_t i = kMaxBulkRecords - 1; i < kept->size(); ++i)
    if ((*kept)[i].status != "running") (void)c.redis.call(Command{"HDEL", kBulkKey, (*kept)[i].id});
  a.id = "bulk-" + new_job_id();
  a.requester = c.requester;
  a.started_ms = c.now_ms;
  if (auto ok = save(c.redis, a); !ok) return std::unexpected(ok.error());
  spdlog::info("bulk {} started by key {}: {} in queue {} ({}){}", a.id, loggable(a.requester), a.action, loggable(a.queue),
               loggable(a.filter_text(), 512), a.rate > 0 ? fmt::format(" at {}/s", a.rate) : "");
  reply.rows.push_back(status_row(a));
  reply.summary = fmt::format("{} started: {} in queue {} ({}); dueq bulk status {}", a.id, a.action, a.queue, a.filter_text(), a.id);
  return reply;
}

Result<proto::AdminReply> bulk_status(AdminContext& c, const proto::AdminRequest& request) {
  auto kept = all_actions(c.redis);
  if (!kept) return std::unexpected(kept.error());
  const auto id = request.args.find("id");
  proto::AdminReply reply;
  for (const auto& a : *kept)
    if (id == request.args.end() || a.id == id->second) reply.rows.push_back(status_row(a));
  if (id != request.args.end() && reply.rows.empty()) return fail(Errc::not_found, "no bulk action " + id->second);
  reply.summary = fmt::format("{} bulk actions", reply.rows.size());
  return reply;
}

Result<std::optional<BulkAction>> next_bulk_action(RedisClient& redis) {
  auto kept = all_actions(redis);
  if (!kept) return std::unexpected(kept.error());
  std::optional<BulkAction> oldest;
  for (auto& a : *kept)
    if (a.status == "running" && (!oldest || a.started_ms < oldest->started_ms)) oldest = std::move(a);
  return oldest;
}

namespace {

// What the loop must learn of a page's moves: ready jobs to lease, or an
// earlier due time than it knew of (the earliest a moved job may have).
void note_effects(const BulkAction& a, int64_t changed, int64_t now_ms, AdminEffects& effects) {
  if (changed == 0) return;
  const bool moves = a.action == "run_now" || a.action == "reschedule";
  const int64_t earliest = a.action == "run_now" ? now_ms : a.due_ms;
  // A cancel may free a key's turn (lib/keys.lua) and so ready a parked job.
  if (a.action == "replay" || a.action == "cancel" || (moves && earliest <= now_ms)) effects.ready_queues.push_back(a.queue);
  if (moves && earliest + a.spread_ms > now_ms) effects.due_at(a.queue, std::max(earliest, now_ms));
  // A cancelled member of a flow or batch may have released its group's
  // held job (lua/lib/group.lua): promote looks now.
  if (a.action == "cancel") effects.due_at(a.queue, now_ms);
}

}  // namespace

Result<void> run_bulk_page(RedisClient& redis, const BrokerConfig& config, BulkAction& a, int64_t now_ms, size_t page_size,
                           AdminEffects& effects) {
  auto filter = ListFilter::parse(a.filter);
  auto cursor = ListCursor::parse(a.cursor);
  if (!filter || !cursor) {
    a.status = "failed";
    a.error = !filter ? filter.error().message : cursor.error().message;
  } else {
    // A cancelled job leaves the scheduled set and a replayed or purged one
    // the dead set: the cursor still moves past them in score order.
    auto page = scan_jobs(redis, a.queue, *filter, *cursor, page_size, kListExamined);
    if (!page) return std::unexpected(page.error());
    std::vector<std::string> ids;
    for (const auto& row : page->rows.rows) ids.push_back(row.at("id"));
    auto changed = apply(redis, config, a, ids, now_ms);
    if (!changed) return std::unexpected(changed.error());
    // The record moves past a page only once its changes would survive a
    // fail-over (a page done twice changes nothing twice).
    if (auto kept = await_replicas(redis, config); !kept) return std::unexpected(kept.error());
    a.changed += *changed;
    note_effects(a, *changed, now_ms, effects);
    a.cursor = page->next ? page->next->text() : "";
    if (!page->next) a.status = "finished";
  }
  if (a.status != "running") {
    a.finished_ms = now_ms;
    spdlog::info("bulk {} by key {} {}: {} in queue {} ({}): {} jobs changed{}", a.id, loggable(a.requester), a.status, a.action,
                 loggable(a.queue), loggable(a.filter_text(), 512), a.changed, a.error.empty() ? "" : ": " + a.error);
  }
  return save(redis, a);
}

}  // namespace dueq::broker
