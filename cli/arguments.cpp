#include "cli/arguments.hpp"

#include <charconv>
#include <fstream>
#include <tuple>

#include <fmt/format.h>

#include "cli/output.hpp"
#include "common/clock.hpp"
#include "common/duration.hpp"
#include "common/ids.hpp"
#include "common/names.hpp"

namespace dueq::cli {
namespace {

// The first problem with the queue names and job ids a command was given.
std::optional<std::string> names_problem(const std::vector<std::string>& queues, const std::vector<std::string>& ids) {
  for (const auto& q : queues)
    if (!q.empty())
      if (auto ok = validate_queue_name(q); !ok) return ok.error().message;
  for (const auto& id : ids)
    if (auto ok = validate_job_id(id); !ok) return fmt::format("'{}': {}", id, ok.error().message);
  return std::nullopt;
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

// `dueq dead replay` and `dead purge`'s choice of what they act on.
std::string dead_problem(Invocation& v) {
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
  return {};
}

// `--since` and `--until` of `dueq list`, `search` and `bulk run`, in ms.
std::string window_problem(Invocation& v) {
  for (auto [flag, text, name, args] : {std::tuple{"--since", &v.list_since, "since", &v.list_args},
                                        std::tuple{"--until", &v.list_until, "until", &v.list_args},
                                        std::tuple{"--since", &v.bulk_since, "since", &v.bulk_args},
                                        std::tuple{"--until", &v.bulk_until, "until", &v.bulk_args}}) {
    if (text->empty()) continue;
    auto ms = time_ms(*text);
    if (!ms) return fmt::format("{}: {}", flag, ms.error());
    (*args)[name] = std::to_string(*ms);
  }
  return {};
}

// `dueq bulk run`'s new due time, spread and rate, as the broker takes them.
std::string bulk_problem(Invocation& v) {
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
  return {};
}

}  // namespace

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

std::string arguments_problem(Invocation& v) {
  for (auto* rule : {dead_problem, window_problem, bulk_problem})
    if (auto problem = rule(v); !problem.empty()) return problem;
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

std::expected<int64_t, std::string> positive_duration(const char* flag, const std::string& text, int64_t min_ms) {
  auto ms = parse_duration_ms(text);
  if (ms && *ms >= min_ms) return *ms;
  if (!ms) return std::unexpected(fmt::format("{}: {}", flag, ms.error().message));
  return std::unexpected(fmt::format("{}: {}", flag, min_ms > 1 ? fmt::format("at least {}ms", min_ms) : "must be positive"));
}

}  // namespace dueq::cli
