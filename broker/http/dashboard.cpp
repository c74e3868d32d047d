#include "broker/http/dashboard.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>
#include <set>

#include "broker/admin/admin_commands.hpp"
#include "broker/admin/job_list.hpp"
#include "broker/admin/job_search.hpp"
#include "broker/dashboard_page.hpp"  // generated: kDashboardPage, broker/http/dashboard.html
#include "common/job_document.hpp"
#include "common/json_bytes.hpp"
#include "common/logging.hpp"
#include "common/names.hpp"

namespace dueq::broker {

namespace {

using nlohmann::json;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void bad_request(httplib::Response& res, const std::string& why) { send_json(res, 400, {{"error", "bad_argument"}, {"message", why}}); }

// Constant time in the token's length: a wrong guess says nothing of how close it was.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

int status_of(const std::string& code) {
  if (code == "bad_argument") return 400;
  if (code == "not_found") return 404;
  if (code == "conflict") return 409;
  if (code == "overloaded" || code == "unavailable" || code == "not_leader" || code == "timeout") return 503;
  return 500;
}

// The queue parameter: absent, or a valid name.
std::optional<std::string> queue_param(const httplib::Request& req, httplib::Response& res, bool required) {
  const std::string queue = req.get_param_value("queue");
  if (queue.empty() && !required) return std::string();
  if (auto ok = validate_queue_name(queue); !ok) {
    bad_request(res, ok.error().message);
    return std::nullopt;
  }
  return queue;
}

// The limit parameter: `fallback` when absent, else 1..max; nullopt when bad.
std::optional<uint32_t> limit_param(const httplib::Request& req, uint32_t fallback, uint32_t max) {
  const std::string text = req.get_param_value("limit");
  if (text.empty()) return fallback;
  uint32_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v == 0 || v > max) return std::nullopt;
  return v;
}

// A replay or purge body: {"ids": [...], "queue": "Q"} or {"all": true,
// "queue": "Q"} (replay only), every field checked.
Result<proto::AdminRequest> change_request(const std::string& op, const std::string& text) {
  const json body = json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return fail(Errc::bad_argument, "expected a JSON object");
  proto::AdminRequest request{0, op, "", {}, 0, 0};
  if (body.contains("queue")) {
    if (!body["queue"].is_string()) return fail(Errc::bad_argument, "queue: expected a string");
    request.queue = body["queue"].get<std::string>();
    if (auto ok = validate_queue_name(request.queue); !ok) return std::unexpected(ok.error());
  }
  if (body.contains("ids")) {
    if (!body["ids"].is_array() || body["ids"].size() > Dashboard::kMaxIds)
      return fail(Errc::bad_argument, fmt::format("ids: an array of at most {}", Dashboard::kMaxIds));
    for (const auto& id : body["ids"]) {
      if (!id.is_string()) return fail(Errc::bad_argument, "ids: expected strings");
      if (auto ok = validate_job_id(id.get<std::string>()); !ok) return std::unexpected(ok.error());
      request.ids.push_back(id.get<std::string>());
    }
  }
  // Compared, not read with value(): a non-boolean `all` must be a 400, not a type_error.
  const bool all = body.contains("all") && body["all"] == true;
  if (request.ids.empty() == !all || (all && (request.queue.empty() || op != "replay")))
    return fail(Errc::bad_argument, "give ids, or (replay) all with a queue");
  return request;
}

// A bulk body: {"queue", "action", "state", and the optional "type",
// "since", "until", "error", "id_prefix" (strings), "rate", "at_ms" and
// "spread_ms" (whole numbers), "dry_run" (a boolean)}; the admin thread checks the
// values as it does for `dueq bulk run`.
Result<proto::AdminRequest> bulk_request(const std::string& text) {
  const json body = json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return fail(Errc::bad_argument, "expected a JSON object");
  proto::AdminRequest request{0, "bulk", "", {}, 0, 0};
  static constexpr std::array<const char*, 8> kText{"queue", "action", "state", "type", "since", "until", "error", "id_prefix"};
  for (const auto& item : body.items())
    if (std::find_if(kText.begin(), kText.end(), [&](const char* n) { return item.key() == n; }) == kText.end() &&
        item.key() != "rate" && item.key() != "at_ms" && item.key() != "spread_ms" && item.key() != "dry_run")
      return fail(Errc::bad_argument, "bulk: unknown field " + item.key());
  for (const char* name : kText) {
    if (!body.contains(name)) continue;
    const json& value = body[name];
    if (!value.is_string()) return fail(Errc::bad_argument, fmt::format("bulk: {} must be a string", name));
    std::string text = value.get<std::string>();
    if (std::string_view(name) == "queue") request.queue = std::move(text);
    else request.args.insert_or_assign(name, std::move(text));
  }
  for (const char* name : {"rate", "at_ms", "spread_ms"}) {
    if (!body.contains(name)) continue;
    if (!body[name].is_number_integer()) return fail(Errc::bad_argument, fmt::format("bulk: {} must be a whole number", name));
    request.args.insert_or_assign(name, std::to_string(body[name].get<int64_t>()));
  }
  if (body.contains("dry_run")) {
    if (!body["dry_run"].is_boolean()) return fail(Errc::bad_argument, "bulk: dry_run must be true or false");
    if (body["dry_run"].get<bool>()) request.args.insert_or_assign("dry_run", "1");
  }
  if (auto ok = validate_queue_name(request.queue); !ok) return std::unexpected(ok.error());
  return request;
}

// POST /api/job/reschedule ({"id", "queue"?, "at_ms" | "now": true}) and
// /api/job/edit ({"id", "queue"?, "payload" (a string, or bytes as
// {"encoding": "base64", "data"}), "version"}): one job, as
// `dueq job reschedule` and `dueq job edit`.
Result<proto::AdminRequest> job_change_request(const std::string& op, const std::string& text) {
  const json body = json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return fail(Errc::bad_argument, "expected a JSON object");
  const bool edit = op == "job_edit";
  for (const auto& item : body.items())
    if (item.key() != "id" && item.key() != "queue" &&
        (edit ? item.key() != "payload" && item.key() != "version" : item.key() != "at_ms" && item.key() != "now"))
      return fail(Errc::bad_argument, fmt::format("{}: unknown field {}", op, loggable(item.key())));
  proto::AdminRequest request{0, op, "", {}, 0, 0};
  for (const char* name : {"id", "queue"}) {
    if (!body.contains(name)) continue;
    if (!body[name].is_string()) return fail(Errc::bad_argument, fmt::format("{}: expected a string", name));
    if (std::string_view(name) == "id") request.ids.push_back(body[name].get<std::string>());
    else request.queue = body[name].get<std::string>();
  }
  if (request.ids.empty()) return fail(Errc::bad_argument, "id: the job's id is required");
  if (auto ok = validate_job_id(request.ids.front()); !ok) return std::unexpected(ok.error());
  if (!request.queue.empty())
    if (auto ok = validate_queue_name(request.queue); !ok) return std::unexpected(ok.error());
  if (edit) {
    auto payload = body.contains("payload") ? bytes_from_json(body["payload"]) : std::nullopt;
    if (!payload) return fail(Errc::bad_argument, "payload: a string, or {\"encoding\": \"base64\", \"data\"}");
    if (!body.contains("version") || !body["version"].is_string()) return fail(Errc::bad_argument, "version: the job's version");
    request.args = {{"payload", std::move(*payload)}, {"version", body["version"].get<std::string>()}};
  } else if (body.contains("at_ms") && body["at_ms"].is_number_integer() && !body.contains("now")) {
    request.args = {{"at_ms", std::to_string(body["at_ms"].get<int64_t>())}};
  } else if (body.contains("now") && body["now"] == true && !body.contains("at_ms")) {
    request.args = {{"now", "1"}};
  } else {
    return fail(Errc::bad_argument, "give at_ms (a whole number of ms) or now: true");
  }
  return request;
}

}  // namespace

Result<std::string> read_dashboard_token(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  if (!in || !std::getline(in, token)) return fail(Errc::bad_argument, "dashboard_token_file " + path + ": cannot read it");
  if (token.size() < 16 || token.size() > 256 ||
      !std::all_of(token.begin(), token.end(), [](char c) { return c > ' ' && c < 127; }))
    return fail(Errc::bad_argument, "dashboard_token_file " + path + ": its first line must be 16..256 printable characters");
  return token;
}

bool Dashboard::authorized(const httplib::Request& req) const {
  const std::string header = req.get_header_value("Authorization");
  return !token_.empty() && header.starts_with("Bearer ") && same_secret(std::string_view(header).substr(7), token_);
}

std::string Dashboard::overview_json() const {
  const auto s = metrics_.latest();
  json out{{"at_ms", s->taken_ms}, {"counters_read_ms", s->counters_read_ms}, {"leading", s->leading},
           {"epoch", s->epoch},    {"redis_up", s->redis_up},                 {"admin_token", !token_.empty()},
           {"workers", json::array()}, {"queues", json::array()}};
  out["totals"] = {{"workers", s->workers}, {"capacity", s->worker_capacity}, {"held", s->jobs_held}};
  out["cron"] = json::array();
  for (const auto& c : s->cron)
    out["cron"].push_back({{"name", c.name}, {"queue", c.queue}, {"schedule", c.schedule}, {"time_zone", c.time_zone},
                           {"next_tick_ms", c.next_tick_ms}});
  out["lateness_bounds"] = kLatencyBounds;
  for (const auto& w : s->worker_rows) {
    json jobs = json::array();
    for (const auto& j : w.jobs)
      jobs.push_back({{"queue", j.queue},
                      {"id", bytes_json(j.id)},
                      {"started", j.started},
                      {"held_ms", j.held_ms},
                      {"progress", j.progress_percent < 0 ? json(nullptr)
                                                          : json{{"percent", j.progress_percent}, {"text", bytes_json(j.progress_text)}}}});
    out["workers"].push_back({{"id", bytes_json(w.id)}, {"key", bytes_json(w.key)}, {"queues", w.queues}, {"capacity", w.capacity},
                              {"held", w.held}, {"draining", w.draining}, {"silent_ms", w.silent_ms}, {"jobs", std::move(jobs)}});
  }
  for (const auto& [name, q] : s->queues) {
    if (!q.counted) continue;
    const auto& c = q.counters;
    json history = json::array();
    for (const auto& h : q.history) history.push_back(h);
    out["queues"].push_back(
        {{"queue", name}, {"scheduled", c.scheduled}, {"ready", c.waiting}, {"in_flight", c.in_flight},
         {"done", c.done}, {"dead", c.dead}, {"died", c.died}, {"retried", c.retried}, {"accepted", c.accepted},
         {"failed", c.retried + c.died - c.unconfirmed}, {"cancelled", c.cancelled}, {"stale_results", c.stale_acks},
         {"oldest_ready_due_ms", c.oldest_ready_due_ms}, {"paused_since_ms", c.paused_since_ms},
         {"rate_limit", c.rate_limit}, {"rate_burst", c.rate_burst}, {"concurrency_limit", c.concurrency_limit},
         {"history_kept", c.history_kept}, {"history_trimmed", c.history_trimmed}, {"history", std::move(history)}, {"workers", q.workers},
         {"lateness", q.lateness.buckets()}, {"lateness_count", q.lateness.count()}, {"lateness_sum", q.lateness.sum()}});
  }
  return dump_json(out);
}

void Dashboard::answer(Admin::Request request, httplib::Response& res, bool job_rows) const {
  auto frame = admin_.call(std::move(request), kAdminWait);
  if (const auto* e = std::get_if<proto::ErrorFrame>(&frame)) {
    send_json(res, status_of(e->code), {{"error", e->code}, {"message", bytes_json(e->message)}});
  } else if (const auto* job = std::get_if<proto::JobReply>(&frame)) {
    send_json(res, 200, {{"found", job->found}, {"job", job->found ? job_to_json(job_document(job->fields)) : json(nullptr)}});
  } else {
    const auto& reply = std::get<proto::AdminReply>(frame);
    json rows = json::array();
    for (const auto& row : reply.rows) rows.push_back(job_rows ? job_to_json(job_document(row)) : bytes_json(row));
    send_json(res, 200, {{"rows", std::move(rows)}, {"summary", bytes_json(reply.summary)}, {"next", reply.next}});
  }
}

void Dashboard::add_routes(httplib::Server& server) {
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(kDashboardPage), "text/html; charset=utf-8");
    // Everything the page uses comes from here.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:");
  });
  server.Get("/api/overview", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(overview_json(), "application/json");
  });
  server.Get("/api/scheduled", [this](const httplib::Request& req, httplib::Response& res) {
    auto queue = queue_param(req, res, true);
    if (!queue) return;
    auto limit = limit_param(req, 20, 100);
    if (!limit) return bad_request(res, "limit: 1..100");
    answer(proto::AdminRequest{0, "scheduled", *queue, {}, 0, *limit}, res, true);
  });
  server.Get("/api/dead", [this](const httplib::Request& req, httplib::Response& res) {
    auto queue = queue_param(req, res, false);
    if (!queue) return;
    auto limit = limit_param(req, 50, 1'000);
    if (!limit) return bad_request(res, "limit: 1..1000");
    // A page goes on where the `next` of the one before stopped.
    const std::string after = req.get_param_value("after");
    if (auto cursor = DeadListCursor::parse(after); !cursor) return bad_request(res, cursor.error().message);
    answer(proto::AdminRequest{0, "dead_list", *queue, {}, 0, *limit, {{"after", after}}}, res, true);
  });
  add_job_routes(server);
  add_group_routes(server);
  server.Get("/api/bulk", [this](const httplib::Request&, httplib::Response& res) {
    answer(proto::AdminRequest{0, "bulk_status", "", {}, 0, 0}, res);
  });
  server.Post("/api/bulk", [this](const httplib::Request& req, httplib::Response& res) {
    if (!admin_allowed(req, res)) return;
    auto request = bulk_request(req.body);
    if (!request) return bad_request(res, request.error().message);
    answer(std::move(*request), res);
  });
  server.Post("/api/dead/replay", [this](const httplib::Request& req, httplib::Response& res) { change("replay", req, res); });
  server.Post("/api/dead/purge", [this](const httplib::Request& req, httplib::Response& res) { change("purge", req, res); });
}

// Jobs by filter: a state's page (/api/list), a search of every state
// (/api/search), one job (/api/job).
void Dashboard::add_job_routes(httplib::Server& server) {
  server.Get("/api/list", [this](const httplib::Request& req, httplib::Response& res) {
    auto queue = queue_param(req, res, true);
    if (!queue) return;
    auto limit = limit_param(req, 50, kListMaxLimit);
    if (!limit) return bad_request(res, fmt::format("limit: 1..{}", kListMaxLimit));
    // The filters are checked here as the admin thread checks them: a bad one is a 400 at once.
    std::map<std::string, std::string> args;
    for (const char* name : {"state", "type", "since", "until", "error", "id_prefix", "after"})
      if (req.has_param(name)) args[name] = req.get_param_value(name);
    if (auto filter = ListFilter::parse(args); !filter) return bad_request(res, filter.error().message);
    answer(proto::AdminRequest{0, "list", *queue, {}, 0, *limit, std::move(args)}, res, true);
  });
  server.Get("/api/search", [this](const httplib::Request& req, httplib::Response& res) {
    auto queue = queue_param(req, res, true);
    if (!queue) return;
    auto limit = limit_param(req, 50, kListMaxLimit);
    if (!limit) return bad_request(res, fmt::format("limit: 1..{}", kListMaxLimit));
    static const std::set<std::string, std::less<>> kFilters{"states", "type", "since", "until", "error", "id_prefix", "after"};
    std::map<std::string, std::string> args;
    for (const auto& [name, value] : req.params) {
      if (name == "queue" || name == "limit") continue;
      if (!kFilters.contains(name)) return bad_request(res, "search: no parameter " + loggable(name, 64));
      args[name] = value;
    }
    if (auto filter = SearchFilter::parse(args); !filter) return bad_request(res, filter.error().message);
    answer(proto::AdminRequest{0, "search", *queue, {}, 0, *limit, std::move(args)}, res, true);
  });
  server.Get("/api/job", [this](const httplib::Request& req, httplib::Response& res) {
    auto queue = queue_param(req, res, false);
    if (!queue) return;
    const std::string id = req.get_param_value("id");
    if (auto ok = validate_job_id(id); !ok) return bad_request(res, ok.error().message);
    answer(proto::JobRequest{0, id, *queue}, res);
  });
  for (const char* op : {"job_reschedule", "job_edit"}) {
    server.Post(std::string(op) == "job_edit" ? "/api/job/edit" : "/api/job/reschedule",
                [this, op](const httplib::Request& req, httplib::Response& res) {
                  if (!admin_allowed(req, res)) return;
                  auto request = job_change_request(op, req.body);
                  if (!request) return bad_request(res, request.error().message);
                  answer(std::move(*request), res);
                });
  }
}

// A flow parent's children or a batch's members, with the group's counts
// (docs/flows.md): the admin `group` read, its parameters checked here first.
void Dashboard::add_group_routes(httplib::Server& server) {
  server.Get("/api/group", [this](const httplib::Request& req, httplib::Response& res) {
    auto queue = queue_param(req, res, true);
    if (!queue) return;
    std::map<std::string, std::string> args;
    for (const auto& [name, value] : req.params) {
      if (name == "queue") continue;
      if (name != "batch" && name != "parent" && name != "after" && name != "limit")
        return bad_request(res, "group: no parameter " + loggable(name, 64));
      args[name] = value;
    }
    if (args.contains("batch") == args.contains("parent")) return bad_request(res, "give batch or parent");
    if (args.contains("parent"))
      if (auto ok = validate_job_id(args["parent"]); !ok) return bad_request(res, ok.error().message);
    if (args.contains("batch") && (args["batch"].empty() || args["batch"].size() > 128))
      return bad_request(res, "batch: 1..128 bytes");
    if (args.contains("after") && (args["after"].empty() || args["after"].size() > 20 ||
                                   args["after"].find_first_not_of("0123456789") != std::string::npos))
      return bad_request(res, "after: the next of the page before");
    auto limit = limit_param(req, 50, 100);
    if (!limit) return bad_request(res, "limit: 1..100");
    args["limit"] = std::to_string(*limit);
    answer(proto::AdminRequest{0, "group", *queue, {}, 0, 0, std::move(args)}, res);
  });
}

bool Dashboard::admin_allowed(const httplib::Request& req, httplib::Response& res) const {
  if (token_.empty()) {
    send_json(res, 403, {{"error", "refused"}, {"message", "read-only: the broker has no dashboard_token_file"}});
    return false;
  }
  if (!authorized(req)) {
    send_json(res, 401, {{"error", "refused"}, {"message", "changes need the admin token (Authorization: Bearer)"}});
    return false;
  }
  return true;
}

void Dashboard::change(const char* op, const httplib::Request& req, httplib::Response& res) const {
  if (!admin_allowed(req, res)) return;
  auto request = change_request(op, req.body);
  if (!request) return bad_request(res, request.error().message);
  answer(std::move(*request), res);
}

}  // namespace dueq::broker
