// dueq-worker: runs an external command per job. See `dueq-worker --help`.
#include <signal.h>

#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "common/build_info.hpp"
#include "common/duration.hpp"
#include "common/logging.hpp"
#include "common/names.hpp"
#include "dueq/worker.hpp"
#include "worker/exec_handler.hpp"
#include "worker/http_handler.hpp"

namespace {

struct Flags {
  dueq::WorkerOptions options;
  std::vector<std::string> execs;
  std::string timeout = "30m", drain_timeout = "30s", log_level = "info", http_ca_file;
};

void add_flags(CLI::App& app, Flags& f) {
  auto& options = f.options;
  app.add_option("--broker", options.broker, "the broker's endpoint, e.g. tcp://broker-host:7600, or several separated by commas (a leader and its standbys); default tcp://127.0.0.1:7600")
      ->envname("DUEQ_BROKER");
  app.add_option("--queue", options.queues, "queue to serve, NAME or NAME:WEIGHT (repeat for several; the broker shares this worker's free slots by weight)")->required();
  app.add_flag("--strict", options.strict_priority, "take the queues in the order given: a later one's jobs only while no earlier one has any");
  app.add_option("--concurrency", options.concurrency, "commands running at once")->check(CLI::Range(1, 10'000));
  app.add_option("--prefetch", options.prefetch, "extra jobs buffered beyond concurrency (default: adapts to handler time, from concurrency up to 1000 jobs in all)")
      ->check(CLI::Range(0, 10'000));
  app.add_option("--exec", f.execs, "TYPE=COMMAND: run COMMAND (via /bin/sh -c) for jobs of TYPE, or TYPE=https://host/path: POST the payload there (2xx = done); '*' for any type")
      ->required();
  app.add_option("--http-ca-file", f.http_ca_file, "CA certificates (PEM) to verify https:// handlers' servers with (default: the system's)")
      ->check(CLI::ExistingFile);
  app.add_option("--timeout", f.timeout, "per-job hard timeout; the command is killed and the attempt fails");
  app.add_option("--drain-timeout", f.drain_timeout, "on SIGTERM: how long running jobs may finish");
  app.add_option("--worker-id", options.worker_id, "name of this worker (default host-pid-random)");
  app.add_option("--broker-key", options.broker_key, "the broker's CURVE public key: 40 Z85 characters or its .pub file")->envname("DUEQ_BROKER_KEY");
  app.add_option("--key", options.key_file, "this worker's CURVE key file (dueq keygen)")->envname("DUEQ_KEY");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error");
  app.add_flag("!--quiet-jobs", options.log_jobs, "no info line when a job starts and ends (type, attempt, time taken, outcome)");
}

int fail_usage(const std::string& message) {
  fmt::print(stderr, "dueq-worker: {}\n", message);
  return 2;
}

// The flags CLI11 cannot check; "" when all hold. Sets the timeouts.
std::string check_flags(Flags& f, int64_t& timeout_ms) {
  auto timeout = dueq::parse_duration_ms(f.timeout);
  if (!timeout || *timeout == 0) return "--timeout: " + (timeout ? "must be positive" : timeout.error().message);
  timeout_ms = *timeout;
  auto drain_ms = dueq::parse_duration_ms(f.drain_timeout);
  if (!drain_ms) return "--drain-timeout: " + drain_ms.error().message;
  f.options.drain_timeout_ms = *drain_ms;
  const unsigned capacity = f.options.concurrency + (f.options.prefetch == 0 ? f.options.concurrency : f.options.prefetch);
  if (capacity > 10'000) return "--concurrency plus --prefetch must be at most 10000";
  for (const auto& q : f.options.queues)
    if (auto ok = dueq::parse_queue_weight(q); !ok) return "--queue: " + ok.error().message;
  return {};
}

// Each --exec TYPE=COMMAND (or TYPE=https://...) as the worker's handler of TYPE.
std::string add_handlers(dueq::Worker& worker, const Flags& f, int64_t timeout_ms) {
  for (const auto& spec : f.execs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) return "--exec '" + spec + "': expected TYPE=COMMAND";
    const std::string type = spec.substr(0, eq);
    if (type != "*")
      if (auto ok = dueq::validate_job_type(type); !ok) return "--exec: " + ok.error().message;
    const std::string command = spec.substr(eq + 1);
    if (dueq::is_http_target(command)) {
      if (auto ok = dueq::validate_http_target(command); !ok) return "--exec: " + ok.error().message;
      worker.handle(type, dueq::make_http_handler(command, timeout_ms, f.http_ca_file));
    } else {
      worker.handle(type, dueq::make_exec_handler(command, timeout_ms));
    }
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dueq;
  Flags flags;
  CLI::App app{"dueq-worker: runs a command for each job of the queues it serves"};
  app.set_version_flag("--version", dueq::version_text("dueq-worker"));
  add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  int64_t timeout_ms = 0;
  if (const std::string problem = check_flags(flags, timeout_ms); !problem.empty()) return fail_usage(problem);
  if (auto ok = setup_logging("worker", flags.log_level); !ok) return fail_usage(ok.error().message);

  // Handle SIGTERM/SIGINT on a thread of our own: it asks the worker to drain.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Worker worker(flags.options);
  if (const std::string problem = add_handlers(worker, flags, timeout_ms); !problem.empty()) return fail_usage(problem);
  std::thread([&worker, signals] {
    int signo = 0;
    sigwait(&signals, &signo);
    spdlog::info("signal {}: draining", signo);
    worker.stop();
  }).detach();
  return worker.run();
}
