#include "cli/dispatch.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/inspect_commands.hpp"
#include "cli/output.hpp"
#include "cli/top_command.hpp"
#include "common/curve.hpp"

namespace dueq::cli {
namespace {

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

}  // namespace

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
  if (*v.batch || *v.flow) {
    std::erase_if(v.group_args, [](const auto& kv) { return kv.second.empty(); });
    if (*v.batch_close) return admin(client, AdminCommand{"batch_close", v.group_queue, {}, 0, 0, {{"batch", v.group_id}}}, v.json);
    v.group_args[*v.flow ? "parent" : "batch"] = v.group_id;
    return admin(client, AdminCommand{"group", v.group_queue, {}, 0, 0, v.group_args}, v.json);
  }
  if (*v.queue_cmd) return admin(client, AdminCommand{"queue_delete", v.delete_queue, {}, 0, 0}, v.json);
  if (*v.resume) return admin(client, AdminCommand{"resume", v.pause_queue, {}, 0, 0}, v.json);
  if (*v.job && job_command_chosen(v.job_control)) return run_job_command(client, v.job_control, v.json);
  if (*v.wait.command) return run_wait(client, v.wait, v.json);
  if (*v.job) return show_job(client, v.job_id, v.job_queue, v.json);
  return kExitUsage;
}

}  // namespace dueq::cli
