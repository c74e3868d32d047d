// dueq: command-line producer and inspector. Talks only to the broker.
// Everything a command is given is checked before it connects (exit 2 at
// once); a broker it cannot reach, a key the broker refuses or a CURVE
// set-up that cannot work is reported within --connect-timeout.
#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/enqueue_command.hpp"
#include "cli/inspect_commands.hpp"
#include "cli/output.hpp"
#include "cli/top_command.hpp"
#include "common/curve.hpp"
#include "common/duration.hpp"
#include "common/ids.hpp"
#include "common/names.hpp"
#include "dueq/client.hpp"

namespace dueq::cli {
namespace {

constexpr const char* kProduce = "Produce";
constexpr const char* kWatch = "Watch";
constexpr const char* kOperate = "Operate";
constexpr const char* kSetUp = "Set up";

// A usage error found before any network call.
int usage(const std::string& message) {
  fmt::print(stderr, "dueq: {}\n", message);
  return kExitUsage;
}

// The first problem with the queue names and job ids a command was given.
std::optional<std::string> names_problem(const std::vector<std::string>& queues, const std::vector<std::string>& ids) {
  for (const auto& q : queues)
    if (!q.empty())
      if (auto ok = validate_queue_name(q); !ok) return ok.error().message;
  for (const auto& id : ids)
    if (auto ok = validate_job_id(id); !ok) return fmt::format("'{}': {}", id, ok.error().message);
  return std::nullopt;
}

int run(int argc, char** argv) {
  std::string broker = "tcp://127.0.0.1:7600", timeout = "5s", connect_timeout = "2s";
  CLI::App app{"dueq: enqueue jobs and watch and operate queues through a dueq broker"};
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok, 1 error (audit: a violation), 2 bad input, 3 job not found, 75 try again later (no broker, "
      "Redis down, backlog full), 77 refused (this key or its role is not allowed that), 78 CURVE cannot work (a wrong "
      "broker key, or keys on one side only).");
  app.add_option("--broker", broker, "the broker's endpoint, or several separated by commas (a leader and its standbys)")->envname("DUEQ_BROKER");
  app.add_option("--timeout", timeout, "how long to wait for each reply");
  app.add_option("--connect-timeout", connect_timeout, "how long to wait for a connection to a broker before saying what is wrong");
  std::string broker_key, key_file;
  app.add_option("--broker-key", broker_key, "the broker's CURVE public key: 40 Z85 characters or its .pub file")->envname("DUEQ_BROKER_KEY");
  app.add_option("--key", key_file, "this client's CURVE key file (dueq keygen)")->envname("DUEQ_KEY");
  bool json = false;

  EnqueueArgs e;
  auto* enqueue = app.add_subcommand("enqueue", "submit a job (or JSON lines with --from)")->group(kProduce);
  auto* from = enqueue->add_option("--from", e.from, "file of JSON lines ('-' = stdin)");
  auto* queue = enqueue->add_option("--queue", e.queue, "queue name")->excludes(from);
  auto* type = enqueue->add_option("--type", e.type, "job type")->excludes(from);
  auto* payload = enqueue->add_option("--payload", e.payload, "payload string")->excludes(from);
  enqueue->add_option("--payload-file", e.payload_file, "payload file ('-' = stdin)")->excludes(from, payload);
  auto* delay = enqueue->add_option("--delay", e.delay, "due after this long, e.g. 30s")->excludes(from);
  auto* at = enqueue->add_option("--at", e.at, "due at this RFC 3339 time")->excludes(from, delay);
  enqueue->add_option("--at-ms", e.at_ms, "due at this Unix time in ms")->excludes(from, delay, at)->check(CLI::NonNegativeNumber);
  enqueue->add_option("--id", e.id, "job id (default: generated); the same id never makes a second job")->excludes(from);
  enqueue->add_option("--max-attempts", e.max_attempts, "attempts before dead-lettering (default: the queue's)")
      ->excludes(from)->check(CLI::Range(1, 1000));
  enqueue->add_option("--backoff-base", e.backoff_base, "this job's retry backoff base, e.g. 5s (default: the queue's)")->excludes(from);
  enqueue->add_option("--backoff-cap", e.backoff_cap, "this job's retry backoff cap, e.g. 1h (default: the queue's)")->excludes(from);
  enqueue->add_flag("--json", json, "print JSON: {\"id\", \"status\"} (with --from: the counts)");

  auto* stats_cmd = app.add_subcommand("stats", "per-queue counts")->group(kWatch);
  stats_cmd->add_flag("--json", json, "print JSON");

  std::string top_interval = "1s";
  int top_frames = 0;
  auto* top_cmd = app.add_subcommand("top", "a live view of every queue (counts, rates, lateness) and the workers; q quits")->group(kWatch);
  top_cmd->add_option("--interval", top_interval, "time between refreshes (default 1s)");
  top_cmd->add_option("--frames", top_frames, "refresh this many times, then exit (default: until q)")->check(CLI::NonNegativeNumber);
  top_cmd->add_flag("--json", json, "one JSON object per refresh, one per line");

  std::string job_id, job_queue;
  auto* job_cmd = app.add_subcommand("job", "show one job")->group(kWatch);
  job_cmd->add_option("id", job_id, "job id")->required();
  job_cmd->add_option("--queue", job_queue, "queue to look in (default: all)");
  job_cmd->add_flag("--json", json, "print JSON");

  std::string audit_queue;
  auto* audit_cmd = app.add_subcommand("audit", "check that every accepted job is accounted for; exit 1 on a violation")->group(kWatch);
  audit_cmd->add_option("--queue", audit_queue, "only this queue");
  audit_cmd->add_flag("--json", json, "print JSON");

  AdminCommand dead_cmd;
  std::string older_than;
  bool replay_all = false;
  auto* dead = app.add_subcommand("dead", "dead-letter set: list, show, replay, purge")->group(kOperate);
  dead->require_subcommand(1);
  auto* dead_list = dead->add_subcommand("list", "list dead jobs with their reasons");
  dead_list->add_option("--queue", dead_cmd.queue, "only this queue");
  dead_list->add_option("--limit", dead_cmd.limit, "at most this many in all (default 1000); a list also stops at 4 MiB");
  std::string dead_after;
  dead_list->add_option("--after", dead_after, "go on where a list stopped (the cursor it printed)");
  dead_list->add_flag("--json", json, "print JSON");
  std::string show_id;
  auto* dead_show = dead->add_subcommand("show", "one dead job, with payload and every attempt's error");
  dead_show->add_option("id", show_id, "job id")->required();
  dead_show->add_flag("--json", json, "print JSON");
  auto* dead_replay = dead->add_subcommand("replay", "back to the schedule, attempts reset, same id");
  dead_replay->add_option("ids", dead_cmd.ids, "job ids");
  auto* all_flag = dead_replay->add_flag("--all", replay_all, "every dead job of --queue");
  dead_replay->add_option("--queue", dead_cmd.queue, "queue")->needs(all_flag);
  dead_replay->add_flag("--json", json, "print JSON");
  auto* dead_purge = dead->add_subcommand("purge", "delete dead jobs for good");
  dead_purge->add_option("ids", dead_cmd.ids, "job ids");
  dead_purge->add_option("--older-than", older_than, "every dead job that died longer ago than this, e.g. 30d");
  dead_purge->add_option("--queue", dead_cmd.queue, "with --older-than: only this queue");
  dead_purge->add_flag("--json", json, "print JSON");

  std::vector<std::string> cancel_ids;
  std::string cancel_queue;
  auto* cancel_cmd = app.add_subcommand("cancel", "cancel jobs: scheduled ones at once, running ones are stopped")->group(kOperate);
  cancel_cmd->add_option("ids", cancel_ids, "job ids")->required();
  cancel_cmd->add_option("--queue", cancel_queue, "the queue that holds them (needed when two queues hold an id)");
  cancel_cmd->add_flag("--json", json, "print JSON");

  std::string pause_queue;
  auto* pause_cmd = app.add_subcommand("pause", "stop dispatching a queue's jobs (it still accepts and schedules them); "
                                                "holds across broker restarts")->group(kOperate);
  pause_cmd->add_option("queue", pause_queue, "queue")->required();
  pause_cmd->add_flag("--json", json, "print JSON");
  auto* resume_cmd = app.add_subcommand("resume", "dispatch a paused queue's jobs again")->group(kOperate);
  resume_cmd->add_option("queue", pause_queue, "queue")->required();
  resume_cmd->add_flag("--json", json, "print JSON");

  std::map<std::string, std::string> cron_args;
  auto* cron_cmd = app.add_subcommand("cron", "periodic jobs: add, list, remove (entries of the config file are listed too)")->group(kOperate);
  cron_cmd->require_subcommand(1);
  auto* cron_add = cron_cmd->add_subcommand("add", "add or replace an entry: one job per tick (never two), from now on with this definition");
  cron_add->add_option("name", cron_args["name"], "entry name (A-Z a-z 0-9 _ - .); its jobs' ids are NAME@<tick in UTC>")->required();
  cron_add->add_option("--schedule", cron_args["schedule"], "cron expression with seconds, e.g. \"0 30 2 * * *\" (5 fields: second 0)")->required();
  cron_add->add_option("--time-zone", cron_args["time_zone"], "tz database name, e.g. Europe/Berlin (default UTC)");
  cron_add->add_option("--queue", cron_args["queue"], "queue of its jobs")->required();
  cron_add->add_option("--type", cron_args["type"], "type of its jobs")->required();
  cron_add->add_option("--payload", cron_args["payload"], "payload of its jobs");
  cron_add->add_option("--misfire", cron_args["misfire"], "ticks missed while no broker led: skip (default) or run_once");
  cron_add->add_option("--max-attempts", cron_args["max_attempts"], "attempts per job (default: the queue's)");
  cron_add->add_flag("--json", json, "print JSON");
  auto* cron_list = cron_cmd->add_subcommand("list", "every entry with its next ticks");
  cron_list->add_flag("--json", json, "print JSON");
  auto* cron_remove = cron_cmd->add_subcommand("remove", "remove an entry added with cron add; ticks enqueued ahead are cancelled");
  cron_remove->add_option("name", cron_args["name"], "entry name")->required();
  cron_remove->add_flag("--json", json, "print JSON");

  std::string keygen_base;
  auto* keygen = app.add_subcommand("keygen", "write a new CURVE key pair to NAME.key (secret, mode 0600) and NAME.pub")->group(kSetUp);
  keygen->add_option("name", keygen_base, "path and name of the two files, without extension")->required();
  keygen->add_flag("--json", json, "print JSON: the two paths and the public key");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& ex) {
    const int code = app.exit(ex);  // prints help or the error
    return code == 0 ? 0 : kExitUsage;
  }

  // Everything given is checked here, before any connection.
  auto timeout_ms = parse_duration_ms(timeout);
  if (!timeout_ms || *timeout_ms == 0) return usage("--timeout: " + (timeout_ms ? "must be positive" : timeout_ms.error().message));
  auto connect_timeout_ms = parse_duration_ms(connect_timeout);
  if (!connect_timeout_ms || *connect_timeout_ms == 0)
    return usage("--connect-timeout: " + (connect_timeout_ms ? "must be positive" : connect_timeout_ms.error().message));
  auto interval_ms = parse_duration_ms(top_interval);
  if (!interval_ms || *interval_ms < 100) return usage("--interval: " + (interval_ms ? "at least 100ms" : interval_ms.error().message));
  if (*keygen) {
    auto keys = generate_curve_key_pair();
    auto written = keys ? write_curve_key_files(keygen_base, *keys) : Result<void>(std::unexpected(keys.error()));
    if (!written) {
      fmt::print(stderr, "dueq keygen: {}\n", written.error().message);
      return kExitError;
    }
    if (json)
      fmt::print("{}\n", nlohmann::json{{"secret_key_file", keygen_base + ".key"}, {"public_key_file", keygen_base + ".pub"},
                                        {"public_key", keys->public_key}}.dump());
    else
      fmt::print("wrote {0}.key (keep it secret) and {0}.pub\n", keygen_base);
    return 0;
  }
  std::optional<JobSpec> job;
  bool generated_id = false;
  if (*enqueue) {
    if (!e.from.empty()) {
      if (e.from != "-" && !std::ifstream(e.from)) return usage("cannot read " + e.from);
    } else {
      if (queue->count() == 0 || type->count() == 0) return usage("enqueue needs --queue and --type (or --from FILE)");
      auto built = job_from_args(e);
      if (!built) return usage(built.error());
      job = std::move(*built);
      // Made here, not in the library, so that it can be shown when the
      // outcome is unknown: a retry with the same id cannot make a second job.
      generated_id = job->id.empty();
      if (generated_id) job->id = new_job_id();
    }
  }
  if (*dead_replay && (replay_all == !dead_cmd.ids.empty() || (replay_all && dead_cmd.queue.empty())))
    return usage("dead replay needs job ids, or --all --queue Q");
  if (*dead_purge) {
    if (older_than.empty() == dead_cmd.ids.empty()) return usage("dead purge needs job ids, or --older-than AGE");
    if (!older_than.empty()) {
      auto ms = parse_duration_ms(older_than);
      if (!ms || *ms == 0) return usage("--older-than: " + (ms ? "must be positive" : ms.error().message));
      dead_cmd.older_than_ms = *ms;
    }
  }
  std::vector<std::string> ids = dead_cmd.ids;
  ids.insert(ids.end(), cancel_ids.begin(), cancel_ids.end());
  if (*job_cmd) ids.push_back(job_id);
  if (*dead_show) ids.push_back(show_id);
  if (auto problem = names_problem({dead_cmd.queue, cancel_queue, audit_queue, job_queue, pause_queue}, ids)) return usage(*problem);

  // Audits and bulk dead-letter work run on the broker's admin thread at a
  // share of Redis's time and answer when done: wait for them up to 10
  // minutes, asking again every --timeout (the broker ignores a resend of a
  // request it is still working on).
  constexpr int64_t kLongWaitMs = 600'000;
  const bool long_running = *audit_cmd || (*dead && (*dead_list || *dead_replay || *dead_purge));
  const int attempts = long_running ? static_cast<int>(std::max<int64_t>(3, kLongWaitMs / *timeout_ms)) : 3;
  std::optional<Client> connected;
  try {
    connected.emplace(broker, ClientOptions{.timeout_ms = *timeout_ms, .attempts = attempts, .broker_key = broker_key,
                                            .key_file = key_file, .connect_timeout_ms = *connect_timeout_ms});
  } catch (const std::invalid_argument& ex) {  // a malformed endpoint list, keys that cannot be read
    return usage(ex.what());
  }
  Client& client = *connected;
  try {
    if (*enqueue) return job ? enqueue_one(client, std::move(*job), generated_id, json) : enqueue_from(client, e.from, json);
    if (*stats_cmd) return stats(client, json);
    if (*top_cmd) return top(client, *interval_ms, top_frames, json);
    if (*dead) {
      if (*dead_show) return show_job(client, show_id, "", json);
      if (*dead_list) dead_cmd.op = "dead_list";
      if (!dead_after.empty()) dead_cmd.args["after"] = dead_after;
      if (*dead_replay) dead_cmd.op = "replay";
      if (*dead_purge) dead_cmd.op = "purge";
      return admin(client, dead_cmd, json);
    }
    if (*cancel_cmd) return admin(client, AdminCommand{"cancel", cancel_queue, cancel_ids, 0, 0}, json);
    if (*audit_cmd) return admin(client, AdminCommand{"audit", audit_queue, {}, 0, 0}, json);
    if (*pause_cmd) return admin(client, AdminCommand{"pause", pause_queue, {}, 0, 0}, json);
    if (*cron_cmd) {
      std::erase_if(cron_args, [](const auto& kv) { return kv.second.empty(); });
      const char* op = *cron_add ? "cron_add" : *cron_list ? "cron_list" : "cron_remove";
      return admin(client, AdminCommand{op, "", {}, 0, 0, cron_args}, json);
    }
    if (*resume_cmd) return admin(client, AdminCommand{"resume", pause_queue, {}, 0, 0}, json);
    if (*job_cmd) return show_job(client, job_id, job_queue, json);
  } catch (const std::exception& ex) {
    fmt::print(stderr, "dueq: {}\n", ex.what());
    return kExitError;
  }
  return kExitUsage;
}

}  // namespace
}  // namespace dueq::cli

int main(int argc, char** argv) { return dueq::cli::run(argc, argv); }
