#pragma once
// dueq job reschedule / edit: change one waiting job by id (docs/jobs.md,
// "Changing a waiting job").
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

}  // namespace dueq::cli
