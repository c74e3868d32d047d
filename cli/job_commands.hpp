#pragma once
// dueq job reschedule / edit: change one waiting job by id (docs/jobs.md,
// "Changing a waiting job"); dueq wait: wait for one job's end.
#include <string>

#include <CLI/CLI.hpp>

#include "dueq/client.hpp"

namespace dueq::cli {

struct JobCommandArgs {
  CLI::App *reschedule = nullptr, *edit = nullptr;
  std::string id, queue;
  std::string at, in;  // reschedule: --at TIME or --in DURATION
  bool now = false;    // reschedule --now
  std::string payload, payload_file, version;  // edit
};

// Adds `reschedule` and `edit` under `dueq job`.
void add_job_commands(CLI::App& job, JobCommandArgs& a);
bool job_command_chosen(const JobCommandArgs& a);
// What is wrong with the arguments (checked before any connection); "" when nothing is.
std::string job_command_problem(JobCommandArgs& a);
int run_job_command(Client& client, const JobCommandArgs& a, bool json);

struct WaitArgs {
  CLI::App* command = nullptr;
  std::string id, queue, for_text = "30s";
  int64_t for_ms = 0;
};
void add_wait_command(CLI::App& app, WaitArgs& a);
std::string wait_problem(WaitArgs& a);
// Exit 0 done (its result on stdout), 1 dead or cancelled (why on
// stderr), 3 unknown, 75 not ended within --for.
int run_wait(Client& client, const WaitArgs& a, bool json);

}  // namespace dueq::cli
