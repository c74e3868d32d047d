// dueq: command-line producer and inspector. Talks only to the broker.
// Everything a command is given is checked before it connects (exit 2 at
// once); a broker it cannot reach, a key the broker refuses or a CURVE
// set-up that cannot work is reported within --connect-timeout.
#include <algorithm>
#include <optional>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/arguments.hpp"
#include "cli/command_line.hpp"
#include "cli/command_suggestion.hpp"
#include "cli/dispatch.hpp"
#include "cli/output.hpp"
#include "dueq/client.hpp"

namespace dueq::cli {
namespace {

// A usage error found before any network call.
int usage(const std::string& message) {
  fmt::print(stderr, "dueq: {}\n", message);
  return kExitUsage;
}

int run(int argc, char** argv) {
  Invocation v;
  CLI::App app{"dueq: enqueue jobs and watch and operate queues through a dueq broker"};
  define_commands(app, v);
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
