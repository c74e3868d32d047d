#include "cli/job_commands.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli/inspect_commands.hpp"
#include "cli/output.hpp"
#include "common/clock.hpp"
#include "common/duration.hpp"
#include "common/job_document.hpp"
#include "common/json_bytes.hpp"
#include "common/logging.hpp"

namespace dueq::cli {

void add_job_commands(CLI::App& job, JobCommandArgs& a) {
  a.reschedule = job.add_subcommand("reschedule", "move a waiting job's due time (--at, --in) or run it now (--now); "
                                                  "refused (exit 4) while it runs or once it finished");
  a.reschedule->add_option("id", a.id, "job id")->required();
  a.reschedule->add_option("--queue", a.queue, "the job's queue (default: whichever holds the id)");
  auto* at = a.reschedule->add_option("--at", a.at, "the new due time (RFC 3339, or Unix ms)");
  auto* in = a.reschedule->add_option("--in", a.in, "the new due time from now (e.g. 10m)")->excludes(at);
  a.reschedule->add_flag("--now", a.now, "make it ready to run now")->excludes(at, in);
  a.edit = job.add_subcommand("edit", "replace a waiting job's payload if it did not change since its version was read "
                                      "(exit 4 when it did, or when it runs or finished)");
  a.edit->add_option("id", a.id, "job id")->required();
  a.edit->add_option("--queue", a.queue, "the job's queue (default: whichever holds the id)");
  auto* payload = a.edit->add_option("--payload", a.payload, "the new payload");
  a.edit->add_option("--payload-file", a.payload_file, "read the new payload from this file (- for stdin)")->excludes(payload);
  a.edit->add_option("--version", a.version, "the version read (dueq job ID shows it); default: the job's version now");
}

bool job_command_chosen(const JobCommandArgs& a) { return a.reschedule->parsed() || a.edit->parsed(); }

std::string job_command_problem(JobCommandArgs& a) {
  if (a.reschedule->parsed() && a.at.empty() && a.in.empty() && !a.now)
    return "job reschedule needs the new due time: --at TIME, --in DURATION or --now";
  if (!a.at.empty())
    if (auto ms = time_ms(a.at); !ms) return "--at: " + ms.error();
  if (!a.in.empty())
    if (auto ms = parse_duration_ms(a.in); !ms) return "--in: " + ms.error().message;
  if (a.edit->parsed() && a.payload_file.empty() && a.edit->count("--payload") == 0)
    return "job edit needs the new payload: --payload TEXT or --payload-file FILE";
  if (!a.version.empty() && a.version.size() != 16) return "--version: the 16 hex digits dueq job ID shows";
  if (!a.payload_file.empty()) {
    std::ifstream in;
    if (a.payload_file != "-") in.open(a.payload_file, std::ios::binary);
    std::istream& from = a.payload_file == "-" ? std::cin : in;
    if (!from) return "--payload-file: cannot read " + a.payload_file;
    a.payload.assign(std::istreambuf_iterator<char>(from), std::istreambuf_iterator<char>());
  }
  return {};
}

namespace {

int reschedule(Client& client, const JobCommandArgs& a, bool json) {
  AdminCommand command{"job_reschedule", a.queue, {a.id}, 0, 0};
  if (a.now) command.args["now"] = "1";
  if (!a.at.empty()) command.args["at_ms"] = std::to_string(*time_ms(a.at));
  if (!a.in.empty()) command.args["at_ms"] = std::to_string(wall_ms() + *parse_duration_ms(a.in));
  return admin(client, command, json);
}

int edit(Client& client, const JobCommandArgs& a, bool json) {
  std::string version = a.version;
  if (version.empty()) {
    auto job = client.job_document(a.id, a.queue);
    if (!job) return report(job.error());
    if (!*job) return report(ClientError{"not_found", fmt::format("no job {}", loggable(a.id))});
    if ((*job)->version.empty())
      return report(ClientError{"conflict", fmt::format("job {} is {}: its record is gone", loggable(a.id), (*job)->state)});
    version = (*job)->version;
  }
  return admin(client, AdminCommand{"job_edit", a.queue, {a.id}, 0, 0, {{"payload", a.payload}, {"version", version}}}, json);
}

}  // namespace

int run_job_command(Client& client, const JobCommandArgs& a, bool json) {
  return a.edit->parsed() ? edit(client, a, json) : reschedule(client, a, json);
}

void add_wait_command(CLI::App& app, WaitArgs& a) {
  a.command = app.add_subcommand("wait", "wait for a job to end: prints its result (exit 0), or why it died or that it "
                                         "was cancelled (exit 1); exit 75 when it has not ended in time, 3 when no such job");
  a.command->add_option("id", a.id, "job id")->required();
  a.command->add_option("--queue", a.queue, "the job's queue")->required();
  a.command->add_option("--for", a.for_text, "how long to wait at most (default 30s)");
}

std::string wait_problem(WaitArgs& a) {
  auto ms = parse_duration_ms(a.for_text);
  if (!ms) return "--for: " + ms.error().message;
  if (*ms > 7 * 86'400'000LL) return "--for: at most 7 days";
  a.for_ms = *ms;
  return {};
}

int run_wait(Client& client, const WaitArgs& a, bool json) {
  auto end = client.wait(a.id, a.queue, std::chrono::milliseconds(a.for_ms));
  if (!end) return report(end.error());
  static constexpr const char* kStates[] = {"done", "dead", "cancelled", "pending", "unknown"};
  const char* state = kStates[static_cast<int>(end->state)];
  if (json) {
    nlohmann::json out{{"id", bytes_json(a.id)},
                       {"queue", bytes_json(a.queue)},
                       {"state", state},
                       {"finished", end->finished_ms > 0 ? nlohmann::json(iso_time(end->finished_ms)) : nlohmann::json(nullptr)},
                       {"finished_ms", end->finished_ms > 0 ? nlohmann::json(end->finished_ms) : nlohmann::json(nullptr)},
                       {"result", end->state == JobEnd::State::done ? bytes_json(end->result) : nlohmann::json(nullptr)},
                       {"error", end->state == JobEnd::State::dead ? bytes_json(end->error) : nlohmann::json(nullptr)}};
    fmt::print("{}\n", out.dump());
  }
  switch (end->state) {
    case JobEnd::State::done:
      if (!json) std::fwrite(end->result.data(), 1, end->result.size(), stdout);
      return 0;
    case JobEnd::State::dead:
      if (!json) fmt::print(stderr, "job {} is dead: {}\n", loggable(a.id), loggable(end->error, 4096));
      return kExitError;
    case JobEnd::State::cancelled:
      if (!json) fmt::print(stderr, "job {} was cancelled\n", loggable(a.id));
      return kExitError;
    case JobEnd::State::pending:
      if (!json) fmt::print(stderr, "job {} has not ended after {}\n", loggable(a.id), a.for_text);
      return kExitTempFail;
    case JobEnd::State::unknown:
      if (!json) fmt::print(stderr, "no job {} in queue {} (a done job is kept for its queue's done_retention)\n",
                            loggable(a.id), loggable(a.queue));
      return kExitNotFound;
  }
  return kExitError;
}

}  // namespace dueq::cli
