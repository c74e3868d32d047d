// Example of the C++ worker library: handlers for a few job types. With
// --record FILE it appends one line per job start ("id attempt token start_us
// due_ms created_ms pid payload-or-dash traceparent-or-dash"), which the
// end-to-end tests, the nemesis suite and benchmarks read (benchmarks put
// the send time in the payload).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/build_info.hpp"
#include "common/clock.hpp"
#include "common/logging.hpp"
#include "dueq/worker.hpp"

namespace {

// Appends "id attempt token start_us due_ms created_ms pid payload-or-dash
// traceparent-or-dash" for each job start to `fd` (none when fd < 0).
void note_start(int fd, const dueq::Job& job) {
  if (fd < 0) return;
  const int64_t now_us = dueq::wall_us();
  const bool short_word =
      !job.payload.empty() && job.payload.size() <= 32 && job.payload.find_first_of(" \n\t") == std::string::npos;
  const std::string line = fmt::format("{} {} {} {} {} {} {} {} {}\n", job.id, job.attempt, job.token, now_us, job.due_ms,
                                       job.created_ms, ::getpid(), short_word ? job.payload : "-",
                                       job.traceparent.empty() ? "-" : job.traceparent);
  [[maybe_unused]] auto n = ::write(fd, line.data(), line.size());  // O_APPEND: one atomic line
}

// The built-in handlers: noop, echo (returns its payload as the job's
// result), sleep (payload = ms; reports its progress every 10 ms, the text
// naming the job's id), sleep_quiet (the same without reports), crash, fail, snooze
// (payload = ms: asks to run again that much later, every time) and
// snooze_once (the same the first time this process runs the job, done the
// next).
void add_handlers(dueq::Worker& worker, int record_fd) {
  worker.handle("noop", [=](const dueq::Job& job) {
    note_start(record_fd, job);
    return dueq::HandlerResult::done();
  });
  worker.handle("echo", [=](const dueq::Job& job) {
    note_start(record_fd, job);
    return dueq::HandlerResult::done(job.payload);
  });
  const auto sleeper = [=](bool reports) {
    return [=](const dueq::Job& job) {
      note_start(record_fd, job);
      const long ms = std::strtol(job.payload.c_str(), nullptr, 10);
      for (long slept = 0; slept < ms; slept += 10) {
        if (job.cancelled->load()) return dueq::HandlerResult::failed("cancelled");
        if (reports) job.progress(slept * 100 / ms, fmt::format("{} slept {} of {} ms", job.id, slept, ms));
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10L, ms - slept)));
      }
      return dueq::HandlerResult::done();
    };
  };
  worker.handle("sleep", sleeper(true));
  worker.handle("sleep_quiet", sleeper(false));
  // A poison job: takes the whole worker process down with it.
  worker.handle("crash", [=](const dueq::Job& job) {
    note_start(record_fd, job);
    ::raise(SIGKILL);
    return dueq::HandlerResult::done();
  });
  worker.handle("fail", [=](const dueq::Job& job) {
    note_start(record_fd, job);
    return dueq::HandlerResult::failed("asked to fail: " + job.payload);
  });
  worker.handle("snooze", [=](const dueq::Job& job) {
    note_start(record_fd, job);
    return dueq::HandlerResult::snooze(std::chrono::milliseconds(std::strtol(job.payload.c_str(), nullptr, 10)), "asked to snooze");
  });
  auto snoozed = std::make_shared<std::pair<std::mutex, std::set<std::string>>>();
  worker.handle("snooze_once", [=](const dueq::Job& job) {
    note_start(record_fd, job);
    std::lock_guard lock(snoozed->first);
    if (!snoozed->second.insert(job.id).second) return dueq::HandlerResult::done();
    return dueq::HandlerResult::snooze(std::chrono::milliseconds(std::strtol(job.payload.c_str(), nullptr, 10)), "not yet");
  });
}

}  // namespace

int main(int argc, char** argv) {
  dueq::WorkerOptions options;
  std::string record;
  CLI::App app{"dueq-example-worker: the worker library with built-in handlers noop, echo, sleep (payload = ms), fail, crash"};
  app.set_version_flag("--version", dueq::version_text("dueq-example-worker"));
  app.add_option("--broker", options.broker, "broker endpoint, or several separated by commas")->envname("DUEQ_BROKER")->required();
  app.add_option("--queue", options.queues, "queue to serve, NAME or NAME:WEIGHT (repeat for several)")->required();
  app.add_flag("--strict", options.strict_priority, "take the queues in the order given");
  app.add_option("--concurrency", options.concurrency, "handlers at once")->check(CLI::Range(1, 5'000));
  app.add_option("--prefetch", options.prefetch, "extra jobs buffered (default: adapts to handler time)")->check(CLI::Range(0, 9'000));
  app.add_option("--record", record, "append a line per job start to this file");
  app.add_option("--broker-key", options.broker_key, "the broker's CURVE public key: 40 Z85 characters or its .pub file")->envname("DUEQ_BROKER_KEY");
  app.add_option("--key", options.key_file, "this worker's CURVE key file (dueq keygen)")->envname("DUEQ_KEY");
  CLI11_PARSE(app, argc, argv);
  (void)dueq::setup_logging("worker", "warn");

  int record_fd = -1;
  if (!record.empty()) {
    record_fd = ::open(record.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (record_fd < 0) {
      fmt::print(stderr, "cannot open {}\n", record);
      return 2;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  dueq::Worker worker(options);
  add_handlers(worker, record_fd);
  std::thread([&worker, signals] {
    int signo = 0;
    sigwait(&signals, &signo);
    worker.stop();
  }).detach();
  return worker.run();
}
