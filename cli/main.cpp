// dueq: command-line producer and inspector. Talks only to the broker.
#include <algorithm>
#include <optional>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/enqueue_command.hpp"
#include "cli/inspect_commands.hpp"
#include "cli/output.hpp"
#include "common/curve.hpp"
#include "common/duration.hpp"
#include "dueq/client.hpp"

namespace dueq::cli {
namespace {

int run(int argc, char** argv) {
  std::string broker = "tcp://127.0.0.1:7600", timeout = "5s";
  CLI::App app{"dueq: enqueue jobs and inspect queues through a dueq broker"};
  app.require_subcommand(1);
  app.add_option("--broker", broker, "the broker's endpoint, or several separated by commas (a leader and its standbys)")->envname("DUEQ_BROKER");
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
  AdminCommand dead_cmd;
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
  auto timeout_ms = parse_duration_ms(timeout);
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
    auto keys = generate_curve_key_pair();
    auto written = keys ? write_curve_key_files(keygen_base, *keys) : Result<void>(std::unexpected(keys.error()));
    if (!written) {
      fmt::print(stderr, "dueq keygen: {}\n", written.error().message);
      return kExitError;
    }
    fmt::print("wrote {0}.key (keep it secret) and {0}.pub\n", keygen_base);
    return 0;
  }
  std::optional<Client> connected;
  try {
    connected.emplace(broker, ClientOptions{.timeout_ms = *timeout_ms, .attempts = attempts, .broker_key = broker_key, .key_file = key_file});
  } catch (const std::invalid_argument& ex) {  // keys that cannot be read
    fmt::print(stderr, "dueq: {}\n", ex.what());
    return kExitUsage;
  }
  Client& client = *connected;
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
          auto ms = parse_duration_ms(older_than);
          if (!ms || *ms == 0) {
            fmt::print(stderr, "dueq: --older-than: {}\n", ms ? "must be positive" : ms.error().message);
            return kExitUsage;
          }
          dead_cmd.older_than_ms = *ms;
        }
        return admin(client, dead_cmd, false);
      }
    }
    if (*cancel_cmd) return admin(client, AdminCommand{"cancel", cancel_queue, cancel_ids, 0, 0}, false);
    if (*audit_cmd) return admin(client, AdminCommand{"audit", audit_queue, {}, 0, 0}, json);
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
