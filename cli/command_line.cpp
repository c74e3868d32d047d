#include "cli/command_line.hpp"

#include "common/build_info.hpp"

namespace dueq::cli {
namespace {

constexpr const char* kProduce = "Produce";
constexpr const char* kWatch = "Watch";
constexpr const char* kOperate = "Operate";
constexpr const char* kSetUp = "Set up";

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

// Flows and batches (docs/flows.md): producers make them through a
// client; the CLI looks at them and closes batches.
void add_groups(CLI::App& app, Invocation& v) {
  v.batch = app.add_subcommand("batch", "look at and close batches (jobs with success and complete callbacks)");
  v.batch->require_subcommand(1);
  v.batch_status = v.batch->add_subcommand("status", "a batch's counts (total, pending, done, dead, cancelled) and members");
  v.batch_close = v.batch->add_subcommand("close", "close a batch: it takes no more members, and its callbacks run once "
                                                   "every member settled");
  for (auto* sub : {v.batch_status, v.batch_close}) {
    sub->add_option("queue", v.group_queue, "queue")->required();
    sub->add_option("batch", v.group_id, "the batch id")->required();
    sub->add_flag("--json", v.json, "print JSON");
  }
  v.flow = app.add_subcommand("flow", "look at flows (parents that wait for their children)");
  v.flow->require_subcommand(1);
  v.flow_children = v.flow->add_subcommand("children", "a flow parent's state and its children's, with their results");
  v.flow_children->add_option("queue", v.group_queue, "queue")->required();
  v.flow_children->add_option("parent", v.group_id, "the parent's job id")->required();
  v.flow_children->add_flag("--json", v.json, "print JSON");
  for (auto* sub : {v.batch_status, v.flow_children}) {
    sub->add_option("--after", v.group_args["after"], "where the page of members starts (the `next` a page printed)");
    sub->add_option("--limit", v.group_args["limit"], "members at most (default 50, at most 100)");
  }
}

void add_keygen(CLI::App& app, Invocation& v) {
  v.keygen = app.add_subcommand("keygen", "write a new CURVE key pair to NAME.key (secret, mode 0600) and NAME.pub")->group(kSetUp);
  v.keygen->add_option("name", v.keygen_base, "path and name of the two files, without extension")->required();
  v.keygen->add_flag("--json", v.json, "print JSON: the two paths and the public key");
}

}  // namespace

void define_commands(CLI::App& app, Invocation& v) {
  add_connection_options(app, v);
  add_enqueue(app, v);
  add_watch(app, v);
  add_dead(app, v);
  add_operate(app, v);
  add_cron(app, v);
  add_keys(app, v);
  add_groups(app, v);
  add_bulk(app, v);
  add_keygen(app, v);
  app.set_version_flag("--version", version_text("dueq"));
}

}  // namespace dueq::cli
