// dueq: command-line producer and inspector. Talks only to the broker.
#include <algorithm>
#include <deque>
#include <fstream>
#include <future>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/clock.hpp"
#include "common/curve.hpp"
#include "common/duration.hpp"
#include "common/ids.hpp"
#include "dueq/client.hpp"

namespace {

// Exit codes: 0 ok, 1 error, 2 usage/bad input, 3 not found, 75 try again later.
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotFound = 3;
constexpr int kExitTempFail = 75;

int report(const dueq::ClientError& error) {
  fmt::print(stderr, "dueq: {}: {}\n", error.code, error.message);
  if (error.retry_after_ms > 0) fmt::print(stderr, "dueq: retry after {} ms\n", error.retry_after_ms);
  return error.code == "unavailable" || error.code == "overloaded" || error.code == "timeout" ? kExitTempFail : kExitError;
}

std::string format_time(int64_t ms) {
  if (ms <= 0) return "-";
  const time_t secs = ms / 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", buffer, ms % 1000);
}

struct EnqueueArgs {
  std::string queue, type, payload, payload_file, delay, at, id, from, backoff_base, backoff_cap;
  int64_t at_ms = -1;
  uint32_t max_attempts = 0;
};

int enqueue_one(dueq::Client& client, const EnqueueArgs& a) {
  dueq::JobSpec job{a.queue, a.type, a.payload, a.id, 0, a.max_attempts, 0, 0};
  for (auto [text, target, flag] : {std::tuple{&a.backoff_base, &job.backoff_base_ms, "--backoff-base"},
                                     std::tuple{&a.backoff_cap, &job.backoff_cap_ms, "--backoff-cap"}}) {
    if (text->empty()) continue;
    auto ms = dueq::parse_duration_ms(*text);
    if (!ms) {
      fmt::print(stderr, "dueq: {}: {}\n", flag, ms.error().message);
      return kExitUsage;
    }
    *target = *ms;
  }
  if (!a.payload_file.empty()) {
    std::ifstream in(a.payload_file, std::ios::binary);
    if (a.payload_file != "-" && !in) {
      fmt::print(stderr, "dueq: cannot read --payload-file {}\n", a.payload_file);
      return kExitUsage;
    }
    std::ostringstream buffer;
    buffer << (a.payload_file == "-" ? std::cin.rdbuf() : in.rdbuf());
    job.payload = buffer.str();
  }
  if (!a.delay.empty()) {
    auto ms = dueq::parse_duration_ms(a.delay);
    if (!ms) {
      fmt::print(stderr, "dueq: --delay: {}\n", ms.error().message);
      return kExitUsage;
    }
    job.due_ms = dueq::Client::in_ms(*ms);
  } else if (!a.at.empty()) {
    auto ms = dueq::parse_rfc3339_ms(a.at);
    if (!ms) {
      fmt::print(stderr, "dueq: --at: {}\n", ms.error().message);
      return kExitUsage;
    }
    job.due_ms = *ms;
  } else if (a.at_ms >= 0) {
    job.due_ms = a.at_ms;
  }
  // The id is made here, not in the library, so that it can be shown when
  // the outcome is unknown: a retry with the same id cannot make a second job.
  const bool generated = job.id.empty();
  if (generated) job.id = dueq::new_job_id();
  const std::string id = job.id;
  auto result = client.enqueue(std::move(job));
  if (!result) {
    const int rc = report(result.error());
    if (generated) {
      fmt::print("{}\n", id);
      fmt::print(stderr, "dueq: the job's id is {}: retry with --id {} (if it was accepted, the retry says so)\n", id, id);
    }
    return rc;
  }
  switch (result->status) {
    case dueq::EnqueueResult::Status::accepted: fmt::print("{}\n", result->id); return 0;
    case dueq::EnqueueResult::Status::duplicate:
      fmt::print("{}\n", result->id);
      fmt::print(stderr, "dueq: job {} already existed; nothing new was enqueued\n", result->id);
      return 0;
    case dueq::EnqueueResult::Status::rejected:
      fmt::print(stderr, "dueq: rejected: {}\n", result->reason);
      return kExitUsage;
    case dueq::EnqueueResult::Status::overloaded:
      fmt::print(stderr, "dueq: overloaded: {}\ndueq: retry after {} ms\n", result->reason, result->retry_after_ms);
      return kExitTempFail;
  }
  return kExitError;
}

// JSON lines: {"queue","type","payload","delay_ms"|"at_ms","id","max_attempts"}
int enqueue_from(dueq::Client& client, const std::string& path) {
  std::ifstream file(path);
  if (path != "-" && !file) {
    fmt::print(stderr, "dueq: cannot read {}\n", path);
    return kExitUsage;
  }
  std::istream& in = path == "-" ? std::cin : file;
  size_t accepted = 0, duplicate = 0, rejected = 0, overloaded = 0, line_no = 0;
  uint32_t retry_after_ms = 0;
  // Up to kBatchesInFlight batches are outstanding on the one connection:
  // the file is read and sent while the broker stores earlier batches.
  constexpr size_t kBatchesInFlight = 4;
  struct Sent {
    std::future<std::expected<std::vector<dueq::EnqueueResult>, dueq::ClientError>> results;
    std::vector<std::string> ids;
    std::vector<size_t> lines;
  };
  std::deque<Sent> in_flight;
  int first_error = 0;
  std::vector<dueq::JobSpec> batch;
  std::vector<size_t> batch_lines;
  auto settle_oldest = [&] {
    Sent sent = std::move(in_flight.front());
    in_flight.pop_front();
    auto results = sent.results.get();
    if (!results) {
      const int rc = report(results.error());
      if (first_error == 0) first_error = rc;
      // The outcome of this batch is unknown: show every id, generated ones
      // included, so that a retry can reuse them.
      for (size_t i = 0; i < sent.ids.size(); ++i)
        fmt::print(stderr, "dueq: line {}: id {} (outcome unknown)\n", sent.lines[i], sent.ids[i]);
      return;
    }
    for (size_t i = 0; i < results->size(); ++i) {
      const auto& r = (*results)[i];
      if (r.status == dueq::EnqueueResult::Status::accepted) ++accepted;
      else if (r.status == dueq::EnqueueResult::Status::duplicate) ++duplicate;
      else if (r.status == dueq::EnqueueResult::Status::overloaded) {
        ++overloaded;
        retry_after_ms = std::max(retry_after_ms, r.retry_after_ms);
      } else {
        ++rejected;
        fmt::print(stderr, "dueq: line {}: rejected: {}\n", sent.lines[i], r.reason);
      }
    }
  };
  // Sends the batch; false once a batch has failed (no more are sent, the
  // outstanding ones are still settled and reported).
  auto flush = [&]() -> bool {
    if (!batch.empty()) {
      Sent sent{{}, {}, std::move(batch_lines)};
      for (const auto& job : batch) sent.ids.push_back(job.id);
      sent.results = client.enqueue_batch_async(std::move(batch));
      in_flight.push_back(std::move(sent));
      batch.clear();
      batch_lines.clear();
    }
    while (in_flight.size() >= kBatchesInFlight || (first_error == 0 && !in_flight.empty() &&
                                                     in_flight.front().results.wait_for(std::chrono::seconds(0)) ==
                                                         std::future_status::ready))
      settle_oldest();
    return first_error == 0;
  };
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    dueq::JobSpec job;
    try {
      const auto j = nlohmann::json::parse(line);
      if (!j.is_object()) throw std::runtime_error("not a JSON object");
      for (const auto& [key, value] : j.items())
        if (key != "queue" && key != "type" && key != "payload" && key != "delay_ms" && key != "at_ms" && key != "id" &&
            key != "max_attempts" && key != "backoff_base_ms" && key != "backoff_cap_ms")
          throw std::runtime_error("unknown field '" + key + "'");
      job.queue = j.at("queue").get<std::string>();
      job.type = j.at("type").get<std::string>();
      if (j.contains("payload")) job.payload = j["payload"].is_string() ? j["payload"].get<std::string>() : j["payload"].dump();
      if (j.contains("id")) job.id = j["id"].get<std::string>();
      if (j.contains("delay_ms") && j.contains("at_ms")) throw std::runtime_error("give delay_ms or at_ms, not both");
      if (j.contains("delay_ms")) job.due_ms = dueq::Client::in_ms(j["delay_ms"].get<int64_t>());
      if (j.contains("at_ms")) job.due_ms = j["at_ms"].get<int64_t>();
      if (j.contains("max_attempts")) job.max_attempts = j["max_attempts"].get<uint32_t>();
      if (j.contains("backoff_base_ms")) job.backoff_base_ms = j["backoff_base_ms"].get<int64_t>();
      if (j.contains("backoff_cap_ms")) job.backoff_cap_ms = j["backoff_cap_ms"].get<int64_t>();
    } catch (const std::exception& e) {
      fmt::print(stderr, "dueq: {}:{}: {}\n", path, line_no, e.what());
      ++rejected;
      continue;
    }
    if (job.id.empty()) job.id = dueq::new_job_id();
    batch.push_back(std::move(job));
    batch_lines.push_back(line_no);
    if (batch.size() == 1000 && !flush()) break;
  }
  if (first_error == 0) flush();
  while (!in_flight.empty()) settle_oldest();
  if (first_error != 0) return first_error;
  fmt::print("accepted {}, duplicate {}, rejected {}", accepted, duplicate, rejected);
  if (overloaded > 0) fmt::print(", overloaded {} (retry after {} ms)", overloaded, retry_after_ms);
  fmt::print("\n");
  if (rejected > 0) return kExitUsage;
  return overloaded > 0 ? kExitTempFail : 0;
}

int stats(dueq::Client& client, bool json) {
  auto result = client.broker_stats();
  if (!result) return report(result.error());
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& q : result->queues)
      out.push_back({{"queue", q.queue}, {"scheduled", q.scheduled}, {"waiting", q.waiting}, {"in_flight", q.in_flight},
                     {"done", q.done}, {"dead", q.dead}, {"accepted", q.accepted}, {"retried", q.retried},
                     {"stale_acks", q.stale_acks}, {"next_due_ms", q.next_due_ms}});
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("{:<20} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8}  {}\n", "QUEUE", "SCHEDULED", "WAITING",
             "IN_FLIGHT", "DONE", "DEAD", "RETRIED", "STALE", "NEXT_DUE");
  for (const auto& q : result->queues)
    fmt::print("{:<20} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8}  {}\n", q.queue, q.scheduled, q.waiting,
               q.in_flight, q.done, q.dead, q.retried, q.stale_acks, format_time(q.next_due_ms));
  fmt::print("workers registered: {}\n", result->workers);
  return 0;
}

int show_job(dueq::Client& client, const std::string& id, const std::string& queue, bool json) {
  auto result = client.job(id, queue);
  if (!result) return report(result.error());
  if (!*result) {
    fmt::print(stderr, "dueq: no job {} (never enqueued, or done and past its retention)\n", id);
    return kExitNotFound;
  }
  const auto& f = **result;
  auto get = [&](const char* k) {
    auto it = f.find(k);
    return it == f.end() ? std::string() : it->second;
  };
  auto ms = [&](const char* k) { return get(k).empty() ? int64_t{0} : std::stoll(get(k)); };
  // A done or cancelled job keeps only its id and finish time: what is not
  // known is left out (null in JSON), not shown as zero.
  auto known = [&](const char* k) { return f.contains(k); };
  if (json) {
    auto number = [&](const char* k) { return known(k) ? nlohmann::json(ms(k)) : nlohmann::json(nullptr); };
    auto text = [&](const char* k) { return known(k) ? nlohmann::json(get(k)) : nlohmann::json(nullptr); };
    nlohmann::json out{{"id", get("id")}, {"queue", get("queue")}, {"type", text("t")}, {"state", get("s")},
                       {"due_ms", number("d")}, {"attempt", number("a")}, {"max_attempts", number("m")},
                       {"created_ms", number("c")}, {"finished_ms", number("f")}, {"last_error", text("e")},
                       {"error_log", text("el")}};
    if (!get("p").empty()) out["payload"] = get("p");
    if (!get("also_in").empty()) out["also_in"] = get("also_in");
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("id:           {}\nqueue:        {}\n", get("id"), get("queue"));
  if (known("t")) fmt::print("type:         {}\n", get("t"));
  fmt::print("state:        {}\n", get("s"));
  if (known("d")) fmt::print("due:          {}\n", format_time(ms("d")));
  if (known("a") || known("m")) fmt::print("attempt:      {} of {}\n", ms("a"), ms("m"));
  if (known("c")) fmt::print("created:      {}\n", format_time(ms("c")));
  if (known("f")) fmt::print("finished:     {}\n", format_time(ms("f")));
  if (known("e") || known("t")) fmt::print("last error:   {}\n", get("e").empty() ? "-" : get("e"));
  if (!known("t") && (get("s") == "done" || get("s") == "cancelled"))
    fmt::print("(its type, payload and attempts were deleted when it finished; the id stays for done_retention)\n");
  if (!get("also_in").empty())
    fmt::print("also in:      {} (ids are unique per queue: --queue picks one)\n", get("also_in"));
  if (!get("el").empty()) fmt::print("error log:\n{}", get("el"));
  if (!get("p").empty()) fmt::print("payload:      {}\n", get("p"));
  return 0;
}

std::string field(const std::map<std::string, std::string>& row, const char* key) {
  auto it = row.find(key);
  return it == row.end() ? std::string() : it->second;
}

int admin(dueq::Client& client, const dueq::AdminCommand& command, bool json) {
  auto result = client.admin(command);
  if (!result) return report(result.error());
  if (json) {
    nlohmann::json out{{"summary", result->summary}, {"rows", result->rows}};
    fmt::print("{}\n", out.dump());
  } else if (command.op == "dead_list") {
    fmt::print("{:<28} {:<14} {:<14} {:>8}  {:<24} {}\n", "ID", "QUEUE", "TYPE", "ATTEMPTS", "DIED", "REASON");
    for (const auto& row : result->rows)
      fmt::print("{:<28} {:<14} {:<14} {:>8}  {:<24} {}\n", field(row, "id"), field(row, "queue"), field(row, "t"),
                 field(row, "a"), format_time(std::stoll("0" + field(row, "died_ms"))), field(row, "e"));
  } else if (command.op == "cancel") {
    for (const auto& row : result->rows) fmt::print("{}: {}\n", field(row, "id"), field(row, "result"));
  } else if (command.op == "audit") {
    for (const auto& row : result->rows) {
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
    fmt::print("audit: {}\n", result->summary);
  } else {
    for (const auto& row : result->rows) fmt::print("{} {}\n", field(row, "queue"), field(row, "id"));
    fmt::print("{}\n", result->summary);
  }
  if (command.op == "audit" && result->summary != "clean") return kExitError;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string broker = "tcp://127.0.0.1:7600", timeout = "5s";
  CLI::App app{"dueq: enqueue jobs and inspect queues through a dueq broker"};
  app.require_subcommand(1);
  app.add_option("--broker", broker, "the broker's endpoint")->envname("DUEQ_BROKER");
  app.add_option("--timeout", timeout, "how long to wait for each reply");
  std::string broker_key, key_file;
  app.add_option("--broker-key", broker_key, "the broker's CURVE public key: 40 Z85 characters or its .pub file")->envname("DUEQ_BROKER_KEY");
  app.add_option("--key", key_file, "this client's CURVE key file (dueq keygen)")->envname("DUEQ_KEY");
  std::string keygen_base;
  auto* keygen = app.add_subcommand("keygen", "write a new CURVE key pair to NAME.key (secret, mode 0600) and NAME.pub");
  keygen->add_option("name", keygen_base, "path and name of the two files, without extension")->required();

  EnqueueArgs e;
  auto* enqueue = app.add_subcommand("enqueue", "submit a job (or JSON lines with --from)");
  auto* from = enqueue->add_option("--from", e.from, "file of JSON lines ('-' = stdin)");
  auto* queue = enqueue->add_option("--queue", e.queue, "queue name")->excludes(from);
  auto* type = enqueue->add_option("--type", e.type, "job type")->excludes(from);
  auto* payload = enqueue->add_option("--payload", e.payload, "payload string")->excludes(from);
  auto* payload_file = enqueue->add_option("--payload-file", e.payload_file, "payload file ('-' = stdin)")->excludes(from, payload);
  auto* delay = enqueue->add_option("--delay", e.delay, "due after this long, e.g. 30s")->excludes(from);
  auto* at = enqueue->add_option("--at", e.at, "due at this RFC 3339 time")->excludes(from, delay);
  enqueue->add_option("--at-ms", e.at_ms, "due at this Unix time in ms")->excludes(from, delay, at)->check(CLI::NonNegativeNumber);
  enqueue->add_option("--id", e.id, "job id (default: generated); the same id never makes a second job")->excludes(from);
  enqueue->add_option("--max-attempts", e.max_attempts, "attempts before dead-lettering (default: the queue's)")
      ->excludes(from)->check(CLI::Range(1, 1000));
  enqueue->add_option("--backoff-base", e.backoff_base, "this job's retry backoff base, e.g. 5s (default: the queue's)")->excludes(from);
  enqueue->add_option("--backoff-cap", e.backoff_cap, "this job's retry backoff cap, e.g. 1h (default: the queue's)")->excludes(from);
  (void)payload_file;

  bool json = false;
  auto* stats_cmd = app.add_subcommand("stats", "per-queue counts");
  stats_cmd->add_flag("--json", json, "print JSON");

  std::string job_id, job_queue;
  auto* job_cmd = app.add_subcommand("job", "show one job");
  job_cmd->add_option("id", job_id, "job id")->required();
  job_cmd->add_option("--queue", job_queue, "queue to look in (default: all)");
  job_cmd->add_flag("--json", json, "print JSON");

  // Operator commands.
  dueq::AdminCommand dead_cmd;
  std::string older_than;
  bool replay_all = false;
  auto* dead = app.add_subcommand("dead", "dead-letter set: list, show, replay, purge");
  dead->require_subcommand(1);
  auto* dead_list = dead->add_subcommand("list", "list dead jobs with their reasons");
  dead_list->add_option("--queue", dead_cmd.queue, "only this queue");
  dead_list->add_option("--limit", dead_cmd.limit, "at most this many per queue (default 1000)");
  dead_list->add_flag("--json", json, "print JSON");
  std::string show_id;
  auto* dead_show = dead->add_subcommand("show", "one dead job, with payload and every attempt's error");
  dead_show->add_option("id", show_id, "job id")->required();
  dead_show->add_flag("--json", json, "print JSON");
  auto* dead_replay = dead->add_subcommand("replay", "back to the schedule, attempts reset, same id");
  dead_replay->add_option("ids", dead_cmd.ids, "job ids");
  auto* all_flag = dead_replay->add_flag("--all", replay_all, "every dead job of --queue");
  dead_replay->add_option("--queue", dead_cmd.queue, "queue")->needs(all_flag);
  auto* dead_purge = dead->add_subcommand("purge", "delete dead jobs for good");
  dead_purge->add_option("ids", dead_cmd.ids, "job ids");
  dead_purge->add_option("--older-than", older_than, "every dead job that died longer ago than this, e.g. 30d");
  dead_purge->add_option("--queue", dead_cmd.queue, "with --older-than: only this queue");

  std::vector<std::string> cancel_ids;
  std::string cancel_queue;
  auto* cancel_cmd = app.add_subcommand("cancel", "cancel jobs: scheduled ones at once, running ones are stopped");
  cancel_cmd->add_option("ids", cancel_ids, "job ids")->required();
  cancel_cmd->add_option("--queue", cancel_queue, "the queue that holds them (needed when two queues hold an id)");

  std::string audit_queue;
  auto* audit_cmd = app.add_subcommand("audit", "check that every accepted job is accounted for; exit 1 on a violation");
  audit_cmd->add_option("--queue", audit_queue, "only this queue");
  audit_cmd->add_flag("--json", json, "print JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : kExitUsage;
  }
  auto timeout_ms = dueq::parse_duration_ms(timeout);
  if (!timeout_ms || *timeout_ms == 0) {
    fmt::print(stderr, "dueq: --timeout: {}\n", timeout_ms ? "must be positive" : timeout_ms.error().message);
    return kExitUsage;
  }
  // Audits and bulk dead-letter work run on the broker's admin thread at a
  // share of Redis's time and answer when done: wait for them up to 10
  // minutes, asking again every --timeout (the broker ignores a resend of a
  // request it is still working on).
  constexpr int64_t kLongWaitMs = 600'000;
  const bool long_running = *audit_cmd || (*dead && (*dead_list || *dead_replay || *dead_purge));
  const int attempts = long_running ? static_cast<int>(std::max<int64_t>(3, kLongWaitMs / *timeout_ms)) : 3;
  if (*keygen) {
    auto keys = dueq::generate_curve_key_pair();
    auto written = keys ? dueq::write_curve_key_files(keygen_base, *keys) : dueq::Result<void>(std::unexpected(keys.error()));
    if (!written) {
      fmt::print(stderr, "dueq keygen: {}\n", written.error().message);
      return kExitError;
    }
    fmt::print("wrote {0}.key (keep it secret) and {0}.pub\n", keygen_base);
    return 0;
  }
  std::optional<dueq::Client> connected;
  try {
    connected.emplace(broker, dueq::ClientOptions{.timeout_ms = *timeout_ms, .attempts = attempts, .broker_key = broker_key, .key_file = key_file});
  } catch (const std::invalid_argument& ex) {  // keys that cannot be read
    fmt::print(stderr, "dueq: {}\n", ex.what());
    return kExitUsage;
  }
  dueq::Client& client = *connected;
  try {
    if (*enqueue) {
      if (!e.from.empty()) return enqueue_from(client, e.from);
      if (queue->count() == 0 || type->count() == 0) {
        fmt::print(stderr, "dueq: enqueue needs --queue and --type (or --from FILE)\n");
        return kExitUsage;
      }
      return enqueue_one(client, e);
    }
    if (*stats_cmd) return stats(client, json);
    if (*dead) {
      if (*dead_show) return show_job(client, show_id, "", json);
      if (*dead_list) {
        dead_cmd.op = "dead_list";
        return admin(client, dead_cmd, json);
      }
      if (*dead_replay) {
        dead_cmd.op = "replay";
        if (replay_all == !dead_cmd.ids.empty() || (replay_all && dead_cmd.queue.empty())) {
          fmt::print(stderr, "dueq: dead replay needs job ids, or --all --queue Q\n");
          return kExitUsage;
        }
        return admin(client, dead_cmd, false);
      }
      if (*dead_purge) {
        dead_cmd.op = "purge";
        if (older_than.empty() == dead_cmd.ids.empty()) {
          fmt::print(stderr, "dueq: dead purge needs job ids, or --older-than AGE\n");
          return kExitUsage;
        }
        if (!older_than.empty()) {
          auto ms = dueq::parse_duration_ms(older_than);
          if (!ms || *ms == 0) {
            fmt::print(stderr, "dueq: --older-than: {}\n", ms ? "must be positive" : ms.error().message);
            return kExitUsage;
          }
          dead_cmd.older_than_ms = *ms;
        }
        return admin(client, dead_cmd, false);
      }
    }
    if (*cancel_cmd) return admin(client, dueq::AdminCommand{"cancel", cancel_queue, cancel_ids, 0, 0}, false);
    if (*audit_cmd) return admin(client, dueq::AdminCommand{"audit", audit_queue, {}, 0, 0}, json);
    if (*job_cmd) return show_job(client, job_id, job_queue, json);
  } catch (const std::exception& ex) {
    fmt::print(stderr, "dueq: {}\n", ex.what());
    return kExitError;
  }
  return kExitUsage;
}
