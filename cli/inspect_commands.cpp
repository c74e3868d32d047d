#include "cli/inspect_commands.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/output.hpp"
#include "common/job_document.hpp"
#include "common/json_bytes.hpp"
#include "common/logging.hpp"

namespace dueq::cli {

namespace {
// "paused, 20/s burst 5, at most 4 running" or "-".
std::string controls_text(const QueueStats& q) {
  std::vector<std::string> parts;
  if (q.paused_since_ms > 0) parts.push_back("paused");
  if (q.rate_limit > 0) parts.push_back(fmt::format("{:g}/s burst {}", q.rate_limit, q.rate_burst));
  if (q.concurrency_limit > 0) parts.push_back(fmt::format("at most {} running", q.concurrency_limit));
  return parts.empty() ? "-" : fmt::format("{}", fmt::join(parts, ", "));
}
}  // namespace

int stats(Client& client, bool json) {
  auto result = client.broker_stats();
  if (!result) return report(result.error());
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& q : result->queues) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [key, waiting] : q.top_keys) top.push_back({{"key", bytes_json(key)}, {"waiting", waiting}});
      out.push_back({{"queue", q.queue}, {"scheduled", q.scheduled}, {"waiting", q.waiting}, {"in_flight", q.in_flight},
                     {"done", q.done}, {"dead", q.dead}, {"accepted", q.accepted}, {"retried", q.retried},
                     {"stale_acks", q.stale_acks}, {"next_due_ms", q.next_due_ms},
                     {"oldest_ready_due_ms", q.oldest_ready_due_ms}, {"paused_since_ms", q.paused_since_ms},
                     {"rate_limit", q.rate_limit}, {"rate_burst", q.rate_burst}, {"concurrency_limit", q.concurrency_limit},
                     {"history_kept", q.history_kept}, {"history_trimmed", q.history_trimmed},
                     {"keys_running", q.keys_running}, {"waiting_for_key", q.waiting_for_key}, {"top_keys", std::move(top)},
                     {"snoozed", q.snoozed}, {"expired", q.expired}});
    }
    fmt::print("{}\n", dump_json(out));
    return 0;
  }
  fmt::print("{:<20} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}  {:<24} {}\n", "QUEUE", "SCHEDULED",
             "WAITING", "IN_FLIGHT", "DONE", "DEAD", "RETRIED", "SNOOZED", "EXPIRED", "STALE", "NEXT_DUE", "CONTROLS");
  for (const auto& q : result->queues)
    fmt::print("{:<20} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}  {:<24} {}\n", q.queue, q.scheduled,
               q.waiting, q.in_flight, q.done, q.dead, q.retried, q.snoozed, q.expired, q.stale_acks,
               format_time(q.next_due_ms), controls_text(q));
  fmt::print("workers registered: {}\n", result->workers);
  return 0;
}

namespace {

std::string time_or_dash(const std::optional<int64_t>& ms) { return ms ? format_time(*ms) : "-"; }

void print_job(const JobDocument& job) {
  fmt::print("id:           {}\nqueue:        {}\nstate:        {}\n", loggable(job.id, 4096), loggable(job.queue), job.state);
  if (job.record_kept) fmt::print("type:         {}\n", loggable(job.type));
  if (job.due_ms) fmt::print("due:          {}\n", format_time(*job.due_ms));
  if (job.run_at_ms && job.run_at_ms != job.due_ms) fmt::print("runs at:      {}\n", format_time(*job.run_at_ms));
  if (job.lease_deadline_ms) fmt::print("lease until:  {}\n", format_time(*job.lease_deadline_ms));
  if (job.attempt || job.max_attempts)
    fmt::print("attempt:      {} of {}\n", job.attempt.value_or(0), job.max_attempts ? std::to_string(*job.max_attempts) : "?");
  if (job.created_ms) fmt::print("created:      {}\n", format_time(*job.created_ms));
  if (job.started_ms) fmt::print("started:      {}\n", format_time(*job.started_ms));
  if (!job.worker.empty()) fmt::print("worker:       {}\n", loggable(job.worker, 256));
  if (job.progress)
    fmt::print("progress:     {}%{}{}\n", job.progress->percent,
               job.progress->text.empty() ? "" : " " + loggable(job.progress->text, 256),
               job.progress->at_ms ? fmt::format(" (reported {})", format_time(*job.progress->at_ms)) : "");
  if (job.finished_ms) fmt::print("finished:     {}\n", format_time(*job.finished_ms));
  if (job.result) fmt::print("result:       {}\n", job.result->empty() ? "(empty)" : loggable(*job.result, 4096));
  if (job.cancel_requested) fmt::print("cancelling:   asked; its worker was told to stop\n");
  if (job.state == "held") fmt::print("held:         until its {} settle\n", job.has_children ? "children" : "batch's members");
  if (!job.parent.empty()) fmt::print("parent:       {} (waits for it)\n", loggable(job.parent));
  if (!job.batch.empty()) fmt::print("batch:        {} (dueq batch status {} {})\n", loggable(job.batch), loggable(job.queue), loggable(job.batch));
  if (job.has_children) fmt::print("children:     dueq flow children {} {}\n", loggable(job.queue), loggable(job.id));
  if (!job.version.empty() && (job.state == "scheduled" || job.state == "ready"))
    fmt::print("version:      {} (dueq job edit {} --version {})\n", job.version, loggable(job.id), job.version);
  if (job.record_kept || !job.last_error.empty())
    fmt::print("last error:   {}\n", job.last_error.empty() ? "-" : loggable(job.last_error, 4096));
  if (!job.record_kept && (job.state == "done" || job.state == "cancelled"))
    fmt::print("(its type, payload and attempts are no longer kept: past the queue's history_retention or history_max; "
               "the id stays for done_retention)\n");
  if (!job.also_in.empty())
    fmt::print("also in:      {} (ids are unique per queue: --queue picks one)\n", loggable(fmt::format("{}", fmt::join(job.also_in, ", "))));
  if (!job.errors.empty()) fmt::print("errors:\n");
  for (const auto& e : job.errors)
    fmt::print("  {} {:<24} {:<20} {}\n",
               e.counted ? fmt::format("attempt {}", e.number.value_or(0)) : fmt::format("unstarted {}", e.number.value_or(0)),
               time_or_dash(e.at_ms), e.worker.empty() ? "-" : loggable(e.worker), loggable(e.reason, 4096));
  if (job.payload && !job.payload->empty()) fmt::print("payload:      {}\n", loggable(*job.payload, 1 << 20));
}

}  // namespace

int show_job(Client& client, const std::string& id, const std::string& queue, bool json) {
  auto result = client.job_document(id, queue);
  if (!result) return report(result.error());
  if (!*result) {
    fmt::print(stderr, "dueq: no job {} (never enqueued, or done and past its retention)\n", loggable(id));
    return kExitNotFound;
  }
  const JobDocument& job = **result;
  if (json) {
    fmt::print("{}\n", job_json(job));
    return 0;
  }
  print_job(job);
  return 0;
}

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0; at < text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::string field(const std::map<std::string, std::string>& row, const char* key) {
  auto it = row.find(key);
  return it == row.end() ? std::string() : it->second;
}

void print_workers(const AdminResult& result) {
  for (const auto& row : result.rows) {
    fmt::print("{} on {} (pid {}{}): queues {}{}, capacity {}, holds {}, heard from {} ms ago{}\n",
               loggable(field(row, "worker")), loggable(field(row, "host")), field(row, "pid"),
               field(row, "key").empty() ? "" : ", key " + loggable(field(row, "key")), loggable(field(row, "queues"), 512),
               field(row, "strict") == "yes" ? " (strict)" : "", field(row, "capacity"), field(row, "held"),
               field(row, "heard_ms_ago"), field(row, "draining") == "yes" ? ", draining" : "");
    if (!field(row, "jobs").empty()) fmt::print("    {}\n", loggable(field(row, "jobs"), 4096));
  }
  fmt::print("{}\n", result.summary);
}

// The time a row of `dueq list` is in order of.
std::optional<int64_t> order_time(const JobDocument& job) {
  if (job.state == "scheduled" || job.state == "ready") return job.run_at_ms;
  if (job.state == "running") return job.lease_deadline_ms;
  return job.finished_ms;
}

// A page of `dueq list` (one state: no column for it) or `dueq search`.
void print_list(const AdminResult& result, bool with_state) {
  fmt::print("{:<28} {}{:<24} {:<16} {:>7}  {}\n", "ID", with_state ? "STATE      " : "", "TIME (UTC)", "TYPE", "ATTEMPT",
             "LAST ERROR");
  for (const auto& row : result.rows) {
    const JobDocument job = job_document(row);
    fmt::print("{:<28} {}{:<24} {:<16} {:>7}  {}\n", loggable(job.id),
               with_state ? fmt::format("{:<10} ", job.state) : "", time_or_dash(order_time(job)),
               job.record_kept ? loggable(job.type) : "-", job.attempt ? std::to_string(*job.attempt) : "-",
               job.last_error.empty() ? "-" : loggable(job.last_error, 120));
  }
  fmt::print("{}\n", loggable(result.summary, 512));
}

void print_audit(const AdminResult& result) {
  for (const auto& row : result.rows) {
    if (row.contains("problem")) {
      fmt::print("VIOLATION queue {} job {}: {}\n", field(row, "queue"), field(row, "id"), field(row, "problem"));
    } else {
      fmt::print("queue {}: accepted {} = done {} + cancelled {} + purged {} + dead {} + scheduled {} + ready {} + "
                 "leased {}{}\n",
                 field(row, "queue"), field(row, "accepted"), field(row, "done"), field(row, "cancelled"),
                 field(row, "purged"), field(row, "dead"), field(row, "scheduled"), field(row, "ready"),
                 field(row, "leased"),
                 field(row, "imbalance") == "0" ? "" : "  VIOLATION: off by " + field(row, "imbalance"));
    }
  }
  fmt::print("audit: {}\n", result.summary);
}

}  // namespace

void print_bulk(const AdminResult& result, bool json) {
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : result.rows) rows.push_back(bytes_json(row));
    fmt::print("{}\n", dump_json(nlohmann::json{{"summary", bytes_json(result.summary)}, {"rows", std::move(rows)}}));
    return;
  }
  for (const auto& row : result.rows) {
    if (!row.contains("id")) continue;
    fmt::print("{} {} {} in queue {} ({}){}: {} jobs changed, started {} by key {}{}\n", field(row, "id"), field(row, "status"),
               field(row, "action"), loggable(field(row, "queue")), loggable(field(row, "filter"), 512),
               field(row, "rate") == "0" ? "" : " at " + field(row, "rate") + "/s", field(row, "changed"),
               format_time(std::stoll("0" + field(row, "started_ms"))), loggable(field(row, "key")),
               field(row, "error").empty() ? "" : ": " + loggable(field(row, "error"), 512));
  }
  fmt::print("{}\n", loggable(result.summary, 1024));
}

namespace {

// `dueq key list`: each key's turns, waiting jobs and limit (or weight),
// most waiting first within what the broker sent.
void print_keys(const AdminResult& result) {
  auto rows = result.rows;
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::stoll("0" + field(a, "waiting")) > std::stoll("0" + field(b, "waiting"));
  });
  std::string own = "limit";
  for (const char* name : {"rate", "weight"})
    if (!rows.empty() && rows.front().contains(name)) own = name;
  std::string title = own;
  std::transform(title.begin(), title.end(), title.begin(), [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  fmt::print("{:<40} {:>8} {:>8} {:>8}\n", "KEY", "RUNNING", "WAITING", title);
  for (const auto& row : rows)
    fmt::print("{:<40} {:>8} {:>8} {:>8}\n", loggable(field(row, "key")), field(row, "running"), field(row, "waiting"),
               field(row, own.c_str()));
  fmt::print("{}\n", result.summary);
  if (!result.next.empty()) fmt::print("the next page: --after {}\n", result.next);
}

// `dueq batch status` and `dueq flow children`: the group's counts, then a
// line per member (a done one's result, a dead one's error).
void print_group(const AdminResult& result) {
  const auto& s = result.rows.front();
  const bool flow = field(s, "kind") == "flow";
  fmt::print("{} {} in {}: {}{}\n", flow ? "flow parent" : "batch", loggable(field(s, flow ? "parent" : "batch")),
             field(s, "queue"), field(s, "state"), field(s, "open") == "1" ? " (open: it takes more members)" : "");
  fmt::print("total {}  pending {}  done {}  dead {}  cancelled {}\n", field(s, "total"), field(s, "pending"),
             field(s, "done"), field(s, "dead"), field(s, "cancelled"));
  if (!flow)
    fmt::print("on_success {}  on_complete {}\n", field(s, "success").empty() ? "-" : loggable(field(s, "success")),
               field(s, "complete").empty() ? "-" : loggable(field(s, "complete")));
  if (result.rows.size() > 1) fmt::print("{:<40} {:<10} {}\n", flow ? "CHILD" : "MEMBER", "STATE", "RESULT / ERROR");
  for (size_t i = 1; i < result.rows.size(); ++i) {
    const auto& row = result.rows[i];
    const std::string outcome = field(row, "error").empty() ? field(row, "result") : field(row, "error");
    fmt::print("{:<40} {:<10} {}\n", loggable(field(row, "member")), field(row, "member_state"), loggable(outcome, 512));
  }
  if (!result.next.empty()) fmt::print("the next page: --after {}\n", result.next);
}

}  // namespace

int admin(Client& client, const AdminCommand& command, bool json) {
  auto result = client.admin(command);
  if (!result) return report(result.error());
  if (json) {
    // Rows that are jobs are job documents (docs/jobs.md).
    const bool jobs = command.op == "dead_list" || command.op == "list" || command.op == "search";
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : result->rows) rows.push_back(jobs ? job_to_json(job_document(row)) : bytes_json(row));
    nlohmann::json out{{"summary", bytes_json(result->summary)}, {"rows", std::move(rows)}};
    if (jobs) out["next"] = bytes_json(result->next);
    fmt::print("{}\n", dump_json(out));
  } else if (command.op == "dead_list") {
    fmt::print("{:<28} {:<14} {:<14} {:>8}  {:<24} {}\n", "ID", "QUEUE", "TYPE", "ATTEMPTS", "DIED", "REASON");
    for (const auto& row : result->rows)
      fmt::print("{:<28} {:<14} {:<14} {:>8}  {:<24} {}\n", field(row, "id"), field(row, "queue"), field(row, "t"),
                 field(row, "a"), format_time(std::stoll("0" + field(row, "died_ms"))), field(row, "e"));
    if (!result->next.empty()) fmt::print("{}; the next page: dueq dead list --after {}\n", result->summary, result->next);
  } else if (command.op == "pause" || command.op == "resume" || command.op == "queue_delete" || command.op == "cron_add" || command.op == "cron_remove" || command.op == "key_limit" ||
             command.op == "key_rate" || command.op == "key_weight" || command.op == "job_reschedule" || command.op == "job_edit" ||
             command.op == "batch_close") {
    fmt::print("{}\n", result->summary);
  } else if (command.op == "cron_list") {
    fmt::print("{:<20} {:<24} {:<18} {:<14} {:<12} {:<8} {}\n", "NAME", "SCHEDULE", "TIME_ZONE", "QUEUE", "TYPE", "SOURCE", "NEXT TICKS (UTC)");
    for (const auto& row : result->rows) {
      std::string next;
      for (const auto& ms : split_list(field(row, "next_ms"))) next += (next.empty() ? "" : ", ") + format_time(std::stoll(ms));
      fmt::print("{:<20} {:<24} {:<18} {:<14} {:<12} {:<8} {}\n", field(row, "name"), field(row, "schedule"),
                 field(row, "time_zone"), field(row, "queue"), field(row, "type"), field(row, "source"), next);
    }
  } else if (command.op == "key_list") {
    print_keys(*result);
  } else if (command.op == "group") {
    print_group(*result);
  } else if (command.op == "bulk_status") {
    print_bulk(*result, false);
  } else if (command.op == "list" || command.op == "search") {
    print_list(*result, command.op == "search");
  } else if (command.op == "workers") {
    print_workers(*result);
  } else if (command.op == "cancel") {
    for (const auto& row : result->rows) fmt::print("{}: {}\n", field(row, "id"), field(row, "result"));
  } else if (command.op == "audit") {
    print_audit(*result);
  } else {
    for (const auto& row : result->rows) fmt::print("{} {}\n", field(row, "queue"), field(row, "id"));
    fmt::print("{}\n", result->summary);
  }
  if (command.op == "audit" && result->summary != "clean") return kExitError;
  // Every id is answered (the others were cancelled); one the broker does
  // not know is what exit 3 says.
  if (command.op == "cancel" &&
      std::any_of(result->rows.begin(), result->rows.end(), [](const auto& row) { return field(row, "result") == "not found"; }))
    return kExitNotFound;
  return 0;
}

}  // namespace dueq::cli
