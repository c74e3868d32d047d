#pragma once
// What `dueq`'s command line gave (CLI11 fills it in: cli/command_line.cpp),
// checked before any connection (cli/arguments.cpp) and then run against
// the broker (cli/dispatch.cpp).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/enqueue_command.hpp"
#include "cli/job_commands.hpp"
#include "dueq/client.hpp"

namespace dueq::cli {

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
  // Flows and batches (docs/flows.md).
  CLI::App *batch = nullptr, *batch_status = nullptr, *batch_close = nullptr, *flow = nullptr, *flow_children = nullptr;
  std::string group_queue, group_id;
  std::map<std::string, std::string> group_args;
};

}  // namespace dueq::cli
