// dueq: command-line producer and inspector. Talks only to the broker.
// Everything a command is given is checked before it connects (exit 2 at
// once); a broker it cannot reach, a key the broker refuses or a CURVE
// set-up that cannot work is reported within --connect-timeout.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <thread>
#include <cstdint>
#include <expected>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command_suggestion.hpp"
#include "cli/enqueue_command.hpp"
#include "cli/inspect_commands.hpp"
#include "cli/job_commands.hpp"
#include "cli/output.hpp"
#include "cli/top_command.hpp"
#include "common/build_info.hpp"
#include "common/clock.hpp"
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

// Everything the command line can give, and which command it chose.
struct Invocation {
  std::string broker = "tcp://127.0.0.1:7600", timeout = "5s", connect_timeout = "2s", broker_key, key_file;
  bool json = false;
  EnqueueArgs e;
  CLI::App* enqueue = nullptr;
  CLI::Option *queue = nullptr, *type = nullptr;
  CLI::App *stats = nullptr, *top = nullptr, *job = nullptr, *audit = nullptr, *workers = nullptr, *list = nullptr,
           *search = nullptr;
  std::string list_queue, list_since, list_until;
  uint32_t list_limit = 0;
  std::map<std::string, std::string> list_args;
  std::string top_interval = "1s";
  int top_frames = 0;
  std::string job_id, job_queue, audit_queue;
  JobCommandArgs job_control;
  WaitArgs wait;
  AdminCommand dead_cmd;
  std::string older_than, dead_after, show_id;
  bool replay_all = false;
  CLI::App *dead = nullptr, *dead_list = nullptr, *dead_show = nullptr, *dead_replay = nullptr, *dead_purge = nullptr;
  std::vector<std::string> cancel_ids;
  std::string cancel_queue, pause_queue;
  bool pause_create = false;
  CLI::App *cancel = nullptr, *pause = nullptr, *resume = nullptr, *queue_cmd = nullptr, *queue_delete = nullptr;
  std::string delete_queue;
  std::map<std::string, std::string> cron_args;
  CLI::App *cron = nullptr, *cron_add = nullptr, *cron_list = nullptr;
  std::string keygen_base;
  CLI::App* keygen = nullptr;
  CLI::App *bulk = nullptr, *bulk_run = nullptr, *bulk_status = nullptr;
  std::string bulk_action, bulk_queue, bulk_since, bulk_until, bulk_rate, bulk_id, bulk_at, bulk_in, bulk_spread;
  std::map<std::string, std::string> bulk_args;
  bool bulk_dry_run = false, bulk_no_wait = false;
  CLI::App *key_cmd = nullptr, *key_limit = nullptr, *key_rate = nullptr, *key_weight = nullptr, *key_list = nullptr;
  std::string key_queue;
  std::map<std::string, std::string> key_args;
  bool key_list_limits = false, key_list_rates = false, key_list_weights = false;
};

void add_connection_options(CLI::App& app, Invocation& v) {
  app.require_subcommand(1);
  // The connection options work after the command too (dueq stats --broker
  // X): commands added from here on inherit it.
  app.fallthrough();
  app.footer(
      "Exit codes: 0 ok, 1 error (audit: a violation), 2 bad input, 3 job not found, 4 conflict (the job is running or "
      "finished, or changed since it was read), 75 try again later (no broker, "
      "Redis down, backlog full), 77 refused (this key or its role is not allowed that), 78 CURVE cannot work (a wrong "
      "broker key, or keys on one side only).");
  app.add_option("--broker", v.broker, "the broker's endpoint, or several separated by commas (a leader and its standbys)")->envname("DUEQ_BROKER");
  app.add_option("--timeout", v.timeout, "how long to wait for each reply");
  app.add_option("--connect-timeout", v.connect_timeout, "how long to wait for a connection to a broker before saying what is wrong");
  app.add_option("--broker-key", v.broker_key, "the broker's CURVE public key: 40 Z85 characters or its .pub file")->envname("DUEQ_BROKER_KEY");
  app.add_option("--key", v.key_file, "this client's CURVE key file (dueq keygen)")->envname("DUEQ_KEY");
}

void add_enqueue(CLI::App& app, Invocation& v) {
  EnqueueArgs& e = v.e;
  auto* enqueue = v.enqueue = app.add_subcommand("enqueue", "submit a job (or JSON lines with --from)")->group(kProduce);
  auto* from = enqueue->add_option("--from", e.from, "file of JSON lines ('-' = stdin)");
  v.queue = enqueue->add_option("--queue", e.queue, "queue name")->excludes(from);
  v.type = enqueue->add_option("--type", e.type, "job type")->excludes(from);
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
  auto* start_by = enqueue->add_option("--start-by", e.start_by, "never start it after this time (RFC 3339, or Unix ms): "
                                      "past it, it goes dead as expired (docs/jobs.md)")->excludes(from);
  enqueue->add_option("--start-within", e.start_within, "never start it later than this after its due time (e.g. 10m)")
      ->excludes(from, start_by);
  enqueue->add_option("--traceparent", e.traceparent,
                      "W3C trace context of the caller's span, kept with the job and handed to its handler "
                      "(default: $TRACEPARENT; docs/jobs.md, \"Tracing\")")
      ->excludes(from);
  enqueue->add_option("--tracestate", e.tracestate, "W3C tracestate to go with --traceparent (default: $TRACESTATE)")
      ->excludes(from);
  enqueue->add_option("--key", e.key, "the job's key (a tenant, an account...): per-key order and limits, docs/keys.md")
      ->excludes(from);
  auto* unique_key = enqueue->add_option("--unique-key", e.unique_key,
                                         "while this job holds this unique key, a job with the same one is answered "
                                         "duplicate with this job's id (docs/keys.md)")->excludes(from);
  enqueue->add_option("--unique-until", e.unique_until,
                      "how long it holds it: waiting, started, done (default), period, or debounce (while scheduled, "
                      "a job with the key gives it its payload and due time instead)")
      ->check(CLI::IsMember({"waiting", "started", "done", "period", "debounce"}))->needs(unique_key);
  enqueue->add_option("--unique-for", e.unique_for,
                      "period: hold it this long after the enqueue; debounce: the most a debounce may delay it (e.g. 1m)")
      ->needs(unique_key);
  enqueue->add_flag("--json", v.json, "print JSON: {\"id\", \"status\"} (with --from: the counts)");
}

void add_watch(CLI::App& app, Invocation& v) {
  v.stats = app.add_subcommand("stats", "per-queue counts")->group(kWatch);
  v.stats->add_flag("--json", v.json, "print JSON");
  v.top = app.add_subcommand("top", "a live view of every queue (counts, rates, lateness) and how many workers are registered (dueq workers lists them); q quits")->group(kWatch);
  v.top->add_option("--interval", v.top_interval, "time between refreshes (default 1s)");
  v.top->add_option("--frames", v.top_frames, "refresh this many times, then exit (default: until q)")->check(CLI::NonNegativeNumber);
  v.top->add_flag("--json", v.json, "one JSON object per refresh, one per line");
  v.job = app.add_subcommand("job", "show one job; change a waiting one (reschedule, edit)")->group(kWatch);
  v.job->add_option("id", v.job_id, "job id");
  v.job->add_option("--queue", v.job_queue, "queue to look in (default: all)");
  v.job->add_flag("--json", v.json, "print JSON");
  add_job_commands(*v.job, v.job_control);
  add_wait_command(app, v.wait);
  v.wait.command->group(kWatch);
  v.wait.command->add_flag("--json", v.json, "print JSON: {\"state\", \"result\", \"error\", ...}");
  v.list = app.add_subcommand("list", "a queue's jobs in one state, page by page: scheduled and ready by due time, running by "
                                      "lease deadline, done, dead and cancelled by finish time")->group(kWatch);
  v.list->add_option("queue", v.list_queue, "queue")->required();
  v.list->add_option("--state", v.list_args["state"], "scheduled, ready, running, done, dead or cancelled")->required()
      ->check(CLI::IsMember({"scheduled", "ready", "running", "done", "dead", "cancelled"}));
  v.list->add_option("--type", v.list_args["type"], "only jobs of this type");
  v.list->add_option("--since", v.list_since, "from this time on (RFC 3339, or Unix ms) in the state's order");
  v.list->add_option("--until", v.list_until, "up to this time (RFC 3339, or Unix ms)");
  v.list->add_option("--error", v.list_args["error"], "only jobs whose last error contains this text");
  v.list->add_option("--id-prefix", v.list_args["id_prefix"], "only ids that start with this");
  v.list->add_option("--limit", v.list_limit, "at most this many (1..1000, default 100)")->check(CLI::Range(1, 1000));
  v.list->add_option("--after", v.list_args["after"], "go on where a page stopped (the cursor it printed)");
  v.list->add_flag("--json", v.json, "print JSON: {summary, rows (job documents, docs/jobs.md), next}");
  v.search = app.add_subcommand("search", "find a queue's jobs in every state (or --states) by type, time, error text or "
                                          "id prefix, page by page")->group(kWatch);
  v.search->add_option("queue", v.list_queue, "queue")->required();
  v.search->add_option("--states", v.list_args["states"], "only these states, comma-separated: scheduled, ready, running, "
                                                          "dead, done, cancelled (default all)");
  v.search->add_option("--type", v.list_args["type"], "only jobs of this type (a done job whose document is no longer kept "
                                                      "has none)");
  v.search->add_option("--since", v.list_since, "from this time on (RFC 3339, or Unix ms) in each state's order");
  v.search->add_option("--until", v.list_until, "up to this time (RFC 3339, or Unix ms)");
  v.search->add_option("--error", v.list_args["error"], "only jobs whose last error contains this text");
  v.search->add_option("--id-prefix", v.list_args["id_prefix"], "only ids that start with this");
  v.search->add_option("--limit", v.list_limit, "about this many (1..1000, default 100)")->check(CLI::Range(1, 1000));
  v.search->add_option("--after", v.list_args["after"], "go on where a page stopped (the cursor it printed)");
  v.search->add_flag("--json", v.json, "print JSON: {summary, rows (job documents, docs/jobs.md), next}");
  v.workers = app.add_subcommand("workers", "every worker: host, pid, key, queues, capacity, the jobs it holds and for how long, "
                                  "when it was last heard from")->group(kWatch);
  v.workers->add_flag("--json", v.json, "print JSON");
  v.audit = app.add_subcommand("audit", "check that every accepted job is accounted for; exit 1 on a violation")->group(kWatch);
  v.audit->add_option("--queue", v.audit_queue, "only this queue");
  v.audit->add_flag("--json", v.json, "print JSON");
}

void add_dead(CLI::App& app, Invocation& v) {
  v.dead = app.add_subcommand("dead", "dead-letter set: list, show, replay, purge")->group(kOperate);
  v.dead->require_subcommand(1);
  v.dead_list = v.dead->add_subcommand("list", "list dead jobs with their reasons");
  v.dead_list->add_option("--queue", v.dead_cmd.queue, "only this queue");
  v.dead_list->add_option("--limit", v.dead_cmd.limit, "at most this many in all (default 1000); a list also stops at 4 MiB");
  v.dead_list->add_option("--after", v.dead_after, "go on where a list stopped (the cursor it printed)");
  v.dead_list->add_flag("--json", v.json, "print JSON");
  v.dead_show = v.dead->add_subcommand("show", "one dead job, with payload and every attempt's error");
  v.dead_show->add_option("id", v.show_id, "job id")->required();
  v.dead_show->add_flag("--json", v.json, "print JSON");
  v.dead_replay = v.dead->add_subcommand("replay", "back to the schedule, attempts reset, same id");
  v.dead_replay->add_option("ids", v.dead_cmd.ids, "job ids");
  auto* all_flag = v.dead_replay->add_flag("--all", v.replay_all, "every dead job of --queue");
  v.dead_replay->add_option("--queue", v.dead_cmd.queue, "queue")->needs(all_flag);
  v.dead_replay->add_flag("--json", v.json, "print JSON");
  v.dead_purge = v.dead->add_subcommand("purge", "delete dead jobs for good");
  v.dead_purge->add_option("ids", v.dead_cmd.ids, "job ids");
  v.dead_purge->add_option("--older-than", v.older_than, "every dead job that died longer ago than this, e.g. 30d");
  v.dead_purge->add_option("--queue", v.dead_cmd.queue, "with --older-than: only this queue");
  v.dead_purge->add_flag("--json", v.json, "print JSON");
}

void add_operate(CLI::App& app, Invocation& v) {
  v.cancel = app.add_subcommand("cancel", "cancel jobs: scheduled ones at once, running ones are stopped")->group(kOperate);
  v.cancel->add_option("ids", v.cancel_ids, "job ids")->required();
  v.cancel->add_option("--queue", v.cancel_queue, "the queue that holds them (needed when two queues hold an id)");
  v.cancel->add_flag("--json", v.json, "print JSON");
  v.pause = app.add_subcommand("pause", "stop dispatching a queue's jobs (it still accepts and schedules them); "
                                        "holds across broker restarts")->group(kOperate);
  v.pause->add_option("queue", v.pause_queue, "queue")->required();
  v.pause->add_flag("--create", v.pause_create, "pause it even if no job was ever enqueued into it (refused otherwise: a typo)");
  v.pause->add_flag("--json", v.json, "print JSON");
  v.queue_cmd = app.add_subcommand("queue", "queues: delete")->group(kOperate);
  v.queue_cmd->require_subcommand(1);
  v.queue_delete = v.queue_cmd->add_subcommand("delete", "remove an empty queue (no job scheduled, ready, running or dead; "
                                                         "its finished jobs' ids go with it); refused with the counts otherwise");
  v.queue_delete->add_option("queue", v.delete_queue, "queue")->required();
  v.queue_delete->add_flag("--json", v.json, "print JSON");
  v.resume = app.add_subcommand("resume", "dispatch a paused queue's jobs again")->group(kOperate);
  v.resume->add_option("queue", v.pause_queue, "queue")->required();
  v.resume->add_flag("--json", v.json, "print JSON");
}

// `dueq key limit|rate|weight QUEUE KEY VALUE`: one key's own setting.
CLI::App* add_key_setting(Invocation& v, const char* name, const char* what, const char* values) {
  CLI::App* sub = v.key_cmd->add_subcommand(name, what);
  sub->add_option("queue", v.key_queue, "queue")->required();
  sub->add_option("key", v.key_args["key"], "the key")->required();
  sub->add_option(name, v.key_args[name], values)->required();
  sub->add_flag("--json", v.json, "print JSON");
  return sub;
}

void add_keys(CLI::App& app, Invocation& v) {
  v.key_cmd = app.add_subcommand("key", "per-key limits and weights (docs/keys.md): limit, rate, weight, list")->group(kOperate);
  v.key_cmd->require_subcommand(1);
  v.key_limit = add_key_setting(v, "limit", "run at most LIMIT jobs of KEY at a time, over the queue's key_concurrency "
                                            "(held in Redis: across restarts and take-overs)",
                                "1..1000000, or clear (the queue's limit again)");
  v.key_rate = add_key_setting(v, "rate", "start at most RATE jobs of KEY a second, over the queue's key_rate (held in "
                                          "Redis: across restarts and take-overs)",
                               "jobs per second, 0.001..1000000, or clear (the queue's key_rate again)");
  v.key_weight = add_key_setting(v, "weight", "give KEY WEIGHT shares of a fair queue's leases while it has jobs ready "
                                              "(1 by default; held in Redis)",
                                 "1..1000, or clear (1 again)");
  v.key_list = v.key_cmd->add_subcommand("list", "the keys holding turns now (jobs running, or an ordered queue's retries)");
  v.key_list->add_option("queue", v.key_queue, "queue")->required();
  auto* limits = v.key_list->add_flag("--limits", v.key_list_limits, "list the keys with a limit of their own instead");
  auto* rates = v.key_list->add_flag("--rates", v.key_list_rates, "list the keys with a rate limit of their own instead")
                    ->excludes(limits);
  v.key_list->add_flag("--weights", v.key_list_weights, "list the keys with a weight of their own instead")
      ->excludes(limits)
      ->excludes(rates);
  v.key_list->add_option("--after", v.key_args["after"], "where the page starts (the next page's cursor a listing printed)");
  v.key_list->add_option("--limit", v.list_limit, "rows at most (default 100, at most 1000)");
  v.key_list->add_flag("--json", v.json, "print JSON");
}

void add_cron(CLI::App& app, Invocation& v) {
  auto& args = v.cron_args;
  v.cron = app.add_subcommand("cron", "periodic jobs: add, list, remove (entries of the config file are listed too)")->group(kOperate);
  v.cron->require_subcommand(1);
  auto* add = v.cron_add = v.cron->add_subcommand("add", "add or replace an entry: one job per tick (never two), from now on with this definition");
  add->add_option("name", args["name"], "entry name (A-Z a-z 0-9 _ - .); its jobs' ids are NAME@<tick in UTC>")->required();
  add->add_option("--schedule", args["schedule"], "cron expression with seconds, e.g. \"0 30 2 * * *\" (5 fields: second 0)")->required();
  add->add_option("--time-zone", args["time_zone"], "tz database name, e.g. Europe/Berlin (default UTC)");
  add->add_option("--queue", args["queue"], "queue of its jobs")->required();
  add->add_option("--type", args["type"], "type of its jobs")->required();
  add->add_option("--payload", args["payload"], "payload of its jobs");
  add->add_option("--misfire", args["misfire"], "ticks missed while no broker led: skip (default) or run_once");
  add->add_option("--max-attempts", args["max_attempts"], "attempts per job (default: the queue's)");
  add->add_flag("--json", v.json, "print JSON");
  v.cron_list = v.cron->add_subcommand("list", "every entry with its next ticks");
  v.cron_list->add_flag("--json", v.json, "print JSON");
  auto* remove = v.cron->add_subcommand("remove", "remove an entry added with cron add; ticks enqueued ahead are cancelled");
  remove->add_option("name", args["name"], "entry name")->required();
  remove->add_flag("--json", v.json, "print JSON");
}

void add_bulk(CLI::App& app, Invocation& v) {
  v.bulk = app.add_subcommand("bulk", "act on every job a filter selects: cancel, replay, purge, run_now, reschedule; status")
               ->group(kOperate);
  v.bulk->require_subcommand(1);
  auto* run = v.bulk_run = v.bulk->add_subcommand("run", "cancel scheduled or ready jobs, or replay or purge dead ones, that a "
                                                  "filter selects (as dueq list's); resumed by the next leader if the broker goes");
  run->add_option("action", v.bulk_action, "cancel, replay, purge, run_now or reschedule")
      ->required()
      ->check(CLI::IsMember({"cancel", "replay", "purge", "run_now", "reschedule"}));
  run->add_option("queue", v.bulk_queue, "queue")->required();
  run->add_option("--state", v.bulk_args["state"],
                  "scheduled or ready (cancel, reschedule), scheduled (run_now), dead (replay, purge)")
      ->required();
  run->add_option("--at", v.bulk_at, "reschedule: the new due time (RFC 3339, or Unix ms)");
  run->add_option("--in", v.bulk_in, "reschedule: the new due time from now (e.g. 10m)");
  run->add_option("--spread", v.bulk_spread, "run_now, reschedule: spread the due times over this long (e.g. 10m), each job's by its id");
  run->add_option("--type", v.bulk_args["type"], "only jobs of this type");
  run->add_option("--since", v.bulk_since, "from this time on (RFC 3339, or Unix ms), as dueq list");
  run->add_option("--until", v.bulk_until, "up to this time (RFC 3339, or Unix ms)");
  run->add_option("--error", v.bulk_args["error"], "only jobs whose last error contains this text");
  run->add_option("--id-prefix", v.bulk_args["id_prefix"], "only ids that start with this");
  run->add_option("--rate", v.bulk_rate, "at most this many jobs a second, e.g. 5000/s (default: as fast as the admin share allows)");
  run->add_flag("--dry-run", v.bulk_dry_run, "count the jobs it would change; change nothing");
  run->add_flag("--no-wait", v.bulk_no_wait, "start it and exit (dueq bulk status shows its progress)");
  run->add_flag("--json", v.json, "print JSON");
  v.bulk_status = v.bulk->add_subcommand("status", "bulk actions, newest first: what, by which key, how far");
  v.bulk_status->add_option("id", v.bulk_id, "only this one");
  v.bulk_status->add_flag("--json", v.json, "print JSON");
}

void add_keygen(CLI::App& app, Invocation& v) {
  v.keygen = app.add_subcommand("keygen", "write a new CURVE key pair to NAME.key (secret, mode 0600) and NAME.pub")->group(kSetUp);
  v.keygen->add_option("name", v.keygen_base, "path and name of the two files, without extension")->required();
  v.keygen->add_flag("--json", v.json, "print JSON: the two paths and the public key");
}

int write_key_pair(const Invocation& v) {
  auto keys = generate_curve_key_pair();
  auto written = keys ? write_curve_key_files(v.keygen_base, *keys) : Result<void>(std::unexpected(keys.error()));
  if (!written) {
    fmt::print(stderr, "dueq keygen: {}\n", written.error().message);
    return kExitError;
  }
  if (v.json)
    fmt::print("{}\n", nlohmann::json{{"secret_key_file", v.keygen_base + ".key"}, {"public_key_file", v.keygen_base + ".pub"},
                                      {"public_key", keys->public_key}}.dump());
  else
    fmt::print("wrote {0}.key (keep it secret) and {0}.pub\n", v.keygen_base);
  return 0;
}

// The job `dueq enqueue` was given on its command line (nullopt with
// --from); a usage error as text.
std::expected<std::optional<JobSpec>, std::string> enqueued_job(const Invocation& v, bool& generated_id) {
  if (!v.e.from.empty()) {
    if (v.e.from != "-" && !std::ifstream(v.e.from)) return std::unexpected("cannot read " + v.e.from);
    return std::nullopt;
  }
  if (v.queue->count() == 0 || v.type->count() == 0) return std::unexpected("enqueue needs --queue and --type (or --from FILE)");
  auto job = job_from_args(v.e);
  if (!job) return std::unexpected(job.error());
  // Made here, not in the library, so that it can be shown when the
  // outcome is unknown: a retry with the same id cannot make a second job.
  generated_id = job->id.empty();
  if (generated_id) job->id = new_job_id();
  return std::optional<JobSpec>(std::move(*job));
}

// The commands about one job (job, job reschedule/edit, dead show, wait):
// what is wrong with their arguments, "" when nothing is; their ids join `ids`.
std::string one_job_problem(Invocation& v, std::vector<std::string>& ids) {
  if (*v.job && !job_command_chosen(v.job_control)) {
    if (v.job_id.empty()) return "job needs a job id (or: job reschedule ID, job edit ID)";
    ids.push_back(v.job_id);
  }
  if (job_command_chosen(v.job_control)) {
    if (auto problem = job_command_problem(v.job_control); !problem.empty()) return problem;
    ids.push_back(v.job_control.id);
  }
  if (*v.dead_show) ids.push_back(v.show_id);
  if (*v.wait.command) {
    if (auto problem = wait_problem(v.wait); !problem.empty()) return problem;
    ids.push_back(v.wait.id);
  }
  return {};
}

// The dead-letter and naming rules CLI11 cannot state; "" when all hold.
std::string arguments_problem(Invocation& v) {
  if (*v.dead_replay && (v.replay_all == !v.dead_cmd.ids.empty() || (v.replay_all && v.dead_cmd.queue.empty())))
    return "dead replay needs job ids, or --all --queue Q";
  if (*v.dead_purge) {
    if (v.older_than.empty() == v.dead_cmd.ids.empty()) return "dead purge needs job ids, or --older-than AGE";
    if (!v.older_than.empty()) {
      auto ms = parse_duration_ms(v.older_than);
      if (!ms || *ms == 0) return "--older-than: " + (ms ? "must be positive" : ms.error().message);
      v.dead_cmd.older_than_ms = *ms;
    }
  }
  for (auto [flag, text, name, args] : {std::tuple{"--since", &v.list_since, "since", &v.list_args},
                                        std::tuple{"--until", &v.list_until, "until", &v.list_args},
                                        std::tuple{"--since", &v.bulk_since, "since", &v.bulk_args},
                                        std::tuple{"--until", &v.bulk_until, "until", &v.bulk_args}}) {
    if (text->empty()) continue;
    auto ms = time_ms(*text);
    if (!ms) return fmt::format("{}: {}", flag, ms.error());
    (*args)[name] = std::to_string(*ms);
  }
  if (v.bulk_action == "reschedule" && v.bulk_at.empty() == v.bulk_in.empty())
    return "bulk run reschedule needs the new due time: --at TIME or --in DURATION";
  if (v.bulk_action != "reschedule" && (!v.bulk_at.empty() || !v.bulk_in.empty())) return "--at and --in are for reschedule";
  if (!v.bulk_at.empty()) {
    auto ms = time_ms(v.bulk_at);
    if (!ms) return "--at: " + ms.error();
    v.bulk_args["at_ms"] = std::to_string(*ms);
  }
  if (!v.bulk_in.empty()) {
    auto ms = parse_duration_ms(v.bulk_in);
    if (!ms) return "--in: " + ms.error().message;
    v.bulk_args["at_ms"] = std::to_string(wall_ms() + *ms);
  }
  if (!v.bulk_spread.empty()) {
    auto ms = parse_duration_ms(v.bulk_spread);
    if (!ms) return "--spread: " + ms.error().message;
    if (v.bulk_action != "run_now" && v.bulk_action != "reschedule") return "--spread is for run_now and reschedule";
    v.bulk_args["spread_ms"] = std::to_string(*ms);
  }
  if (!v.bulk_rate.empty()) {
    std::string rate = v.bulk_rate;
    if (rate.ends_with("/s")) rate.resize(rate.size() - 2);
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(rate.data(), rate.data() + rate.size(), n);
    if (rate.empty() || ec != std::errc() || end != rate.data() + rate.size() || n < 1 || n > 100'000)
      return "--rate: jobs a second, 1..100000 (e.g. 5000/s)";
    v.bulk_args["rate"] = std::to_string(n);
  }
  if (const auto& prefix = v.list_args["id_prefix"]; !prefix.empty())
    if (auto ok = validate_job_id(prefix); !ok) return "--id-prefix: " + ok.error().message;
  if (const auto& type = v.list_args["type"]; !type.empty())
    if (auto ok = validate_job_type(type); !ok) return "--type: " + ok.error().message;
  std::vector<std::string> ids = v.dead_cmd.ids;
  ids.insert(ids.end(), v.cancel_ids.begin(), v.cancel_ids.end());
  if (auto problem = one_job_problem(v, ids); !problem.empty()) return problem;
  if (auto problem = names_problem({v.dead_cmd.queue, v.cancel_queue, v.audit_queue, v.job_queue, v.job_control.queue, v.pause_queue, v.list_queue, v.delete_queue, v.bulk_queue, v.wait.queue}, ids))
    return *problem;
  return {};
}

// A positive duration flag; a usage error as text.
std::expected<int64_t, std::string> positive_duration(const char* flag, const std::string& text, int64_t min_ms = 1) {
  auto ms = parse_duration_ms(text);
  if (ms && *ms >= min_ms) return *ms;
  if (!ms) return std::unexpected(fmt::format("{}: {}", flag, ms.error().message));
  return std::unexpected(fmt::format("{}: {}", flag, min_ms > 1 ? fmt::format("at least {}ms", min_ms) : "must be positive"));
}

// `dueq bulk run` (a dry run, or the action started and followed until it
// ends) and `dueq bulk status`.
int bulk(Client& client, Invocation& v) {
  if (*v.bulk_status) {
    AdminCommand status{"bulk_status", "", {}, 0, 0};
    if (!v.bulk_id.empty()) status.args["id"] = v.bulk_id;
    return admin(client, status, v.json);
  }
  std::erase_if(v.bulk_args, [](const auto& kv) { return kv.second.empty(); });
  AdminCommand start{"bulk", v.bulk_queue, {}, 0, 0, v.bulk_args};
  start.args["action"] = v.bulk_action;
  if (v.bulk_dry_run) start.args["dry_run"] = "1";
  auto started = client.admin(start);
  if (!started) return report(started.error());
  if (v.bulk_dry_run || v.bulk_no_wait || started->rows.empty()) {
    print_bulk(*started, v.json);
    return 0;
  }
  const std::string id = started->rows.front().at("id");
  if (!v.json) fmt::print("{}\n", started->summary);
  // Progress until it ends; the broker goes on with it whatever this does.
  for (std::string last;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    AdminCommand status{"bulk_status", "", {}, 0, 0};
    status.args["id"] = id;
    auto now = client.admin(status);
    if (!now) return report(now.error());
    const auto& row = now->rows.front();
    if (!v.json && row.at("changed") != last) fmt::print("{}: {} jobs changed\n", id, last = row.at("changed"));
    if (row.at("status") != "running") {
      print_bulk(*now, v.json);
      return row.at("status") == "finished" ? 0 : kExitError;
    }
  }
}

// Runs the chosen command against the broker; returns the exit code.
int run_command(Client& client, Invocation& v, std::optional<JobSpec>&& job, bool generated_id, int64_t interval_ms) {
  if (*v.enqueue) return job ? enqueue_one(client, std::move(*job), generated_id, v.json) : enqueue_from(client, v.e.from, v.json);
  if (*v.stats) return stats(client, v.json);
  if (*v.top) return top(client, interval_ms, v.top_frames, v.json);
  if (*v.dead) {
    if (*v.dead_show) return show_job(client, v.show_id, "", v.json);
    if (*v.dead_list) v.dead_cmd.op = "dead_list";
    if (!v.dead_after.empty()) v.dead_cmd.args["after"] = v.dead_after;
    if (*v.dead_replay) v.dead_cmd.op = "replay";
    if (*v.dead_purge) v.dead_cmd.op = "purge";
    return admin(client, v.dead_cmd, v.json);
  }
  if (*v.cancel) return admin(client, AdminCommand{"cancel", v.cancel_queue, v.cancel_ids, 0, 0}, v.json);
  if (*v.audit) return admin(client, AdminCommand{"audit", v.audit_queue, {}, 0, 0}, v.json);
  if (*v.workers) return admin(client, AdminCommand{"workers", "", {}, 0, 0}, v.json);
  if (*v.list) {
    std::erase_if(v.list_args, [](const auto& kv) { return kv.second.empty(); });
    return admin(client, AdminCommand{"list", v.list_queue, {}, 0, v.list_limit, v.list_args}, v.json);
  }
  if (*v.search) {
    std::erase_if(v.list_args, [](const auto& kv) { return kv.second.empty(); });
    return admin(client, AdminCommand{"search", v.list_queue, {}, 0, v.list_limit, v.list_args}, v.json);
  }
  if (*v.pause) {
    AdminCommand pause{"pause", v.pause_queue, {}, 0, 0};
    if (v.pause_create) pause.args["create"] = "1";
    return admin(client, pause, v.json);
  }
  if (*v.cron) {
    std::erase_if(v.cron_args, [](const auto& kv) { return kv.second.empty(); });
    const char* op = *v.cron_add ? "cron_add" : *v.cron_list ? "cron_list" : "cron_remove";
    return admin(client, AdminCommand{op, "", {}, 0, 0, v.cron_args}, v.json);
  }
  if (*v.bulk) return bulk(client, v);
  if (*v.key_cmd) {
    std::erase_if(v.key_args, [](const auto& kv) { return kv.second.empty(); });
    if (*v.key_list && v.key_list_limits) v.key_args["of"] = "limits";
    if (*v.key_list && v.key_list_rates) v.key_args["of"] = "rates";
    if (*v.key_list && v.key_list_weights) v.key_args["of"] = "weights";
    const char* op = *v.key_limit ? "key_limit" : *v.key_rate ? "key_rate" : *v.key_weight ? "key_weight" : "key_list";
    return admin(client, AdminCommand{op, v.key_queue, {}, 0, v.list_limit, v.key_args}, v.json);
  }
  if (*v.queue_cmd) return admin(client, AdminCommand{"queue_delete", v.delete_queue, {}, 0, 0}, v.json);
  if (*v.resume) return admin(client, AdminCommand{"resume", v.pause_queue, {}, 0, 0}, v.json);
  if (*v.job && job_command_chosen(v.job_control)) return run_job_command(client, v.job_control, v.json);
  if (*v.wait.command) return run_wait(client, v.wait, v.json);
  if (*v.job) return show_job(client, v.job_id, v.job_queue, v.json);
  return kExitUsage;
}

int run(int argc, char** argv) {
  Invocation v;
  CLI::App app{"dueq: enqueue jobs and watch and operate queues through a dueq broker"};
  add_connection_options(app, v);
  add_enqueue(app, v);
  add_watch(app, v);
  add_dead(app, v);
  add_operate(app, v);
  add_cron(app, v);
  add_keys(app, v);
  add_bulk(app, v);
  add_keygen(app, v);
  app.set_version_flag("--version", version_text("dueq"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& ex) {
    std::vector<std::string> commands;
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) commands.push_back(sub->get_name());
    if (auto near = nearest_command(commands, {argv + 1, argv + argc})) return usage(*near);
    const int code = app.exit(ex);  // prints help or the error
    return code == 0 ? 0 : kExitUsage;
  }

  // Everything given is checked here, before any connection.
  const auto timeout_ms = positive_duration("--timeout", v.timeout);
  if (!timeout_ms) return usage(timeout_ms.error());
  const auto connect_timeout_ms = positive_duration("--connect-timeout", v.connect_timeout);
  if (!connect_timeout_ms) return usage(connect_timeout_ms.error());
  const auto interval_ms = positive_duration("--interval", v.top_interval, 100);
  if (!interval_ms) return usage(interval_ms.error());
  if (*v.keygen) return write_key_pair(v);
  bool generated_id = false;
  std::optional<JobSpec> job;
  if (*v.enqueue) {
    auto given = enqueued_job(v, generated_id);
    if (!given) return usage(given.error());
    job = std::move(*given);
  }
  if (const std::string problem = arguments_problem(v); !problem.empty()) return usage(problem);

  // Audits and bulk dead-letter work run on the broker's admin thread at a
  // share of Redis's time (a twentieth while jobs flow fast) and answer
  // when done: wait for them up to 30 minutes, asking again every --timeout
  // (the broker ignores a resend of a request it is still working on).
  constexpr int64_t kLongWaitMs = 1'800'000;
  const bool long_running = *v.audit || *v.list || *v.bulk || (*v.dead && (*v.dead_list || *v.dead_replay || *v.dead_purge));
  const int attempts = long_running ? static_cast<int>(std::max<int64_t>(3, kLongWaitMs / *timeout_ms)) : 3;
  std::optional<Client> connected;
  try {
    connected.emplace(v.broker, ClientOptions{.timeout_ms = *timeout_ms, .attempts = attempts, .broker_key = v.broker_key,
                                              .key_file = v.key_file, .connect_timeout_ms = *connect_timeout_ms});
  } catch (const std::invalid_argument& ex) {  // a malformed endpoint list, keys that cannot be read
    return usage(ex.what());
  }
  try {
    return run_command(*connected, v, std::move(job), generated_id, *interval_ms);
  } catch (const std::exception& ex) {
    fmt::print(stderr, "dueq: {}\n", ex.what());
    return kExitError;
  }
}

}  // namespace
}  // namespace dueq::cli

int main(int argc, char** argv) { return dueq::cli::run(argc, argv); }
