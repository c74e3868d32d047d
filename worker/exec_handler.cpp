#include "worker/exec_handler.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <charconv>

#include "common/clock.hpp"
#include "common/duration.hpp"
#include "common/error.hpp"
#include "common/protocol.hpp"
#include "common/unique_fd.hpp"

extern char** environ;

namespace dueq {

namespace {

constexpr size_t kStderrTail = 2048;

// Handler commands die with their worker, however it ends (SIGKILL, OOM):
// a guard process forked once holds the read end of a pipe whose write end
// only the worker (and its children until their exec) has. Each command
// registers its own process group (+pgid) between vfork and exec, and the
// worker deregisters it when reaped (-pgid); when the worker is gone
// the guard reads EOF and SIGKILLs every group still registered, so no job
// finishes after its worker was declared dead and re-delivered it.
// (PR_SET_PDEATHSIG would follow the spawning thread, not the process, and
// reach only the shell, not the commands it starts.)
class HandlerGuard {
 public:
  static HandlerGuard& instance() {
    static HandlerGuard guard;
    return guard;
  }
  void started(pid_t group) { tell(group); }
  void ended(pid_t group) { tell(-group); }

 private:
  static constexpr size_t kMaxGroups = 16'384;  // above the most handlers a worker runs (--concurrency <= 5,000)

  HandlerGuard() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    const pid_t pid = ::fork();
    if (pid == 0) guard_main(fds[0]);
    ::close(fds[0]);
    if (pid < 0) {
      ::close(fds[1]);
      return;
    }
    write_fd_ = fds[1];
  }

  // The child of a process with threads: async-signal-safe calls only.
  [[noreturn]] static void guard_main(int read_fd) {
    // Nothing but the pipe: a socket kept open here would keep the
    // worker's broker connection open after the worker died.
    ::close_range(0, static_cast<unsigned>(read_fd) - 1, 0);
    ::close_range(static_cast<unsigned>(read_fd) + 1, ~0U, 0);
    static pid_t groups[kMaxGroups];
    size_t count = 0;
    int32_t message[1024];
    while (true) {
      const ssize_t n = ::read(read_fd, message, sizeof message);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      // Each message is one 4-byte write, which a pipe never splits.
      for (ssize_t i = 0; i < n / 4; ++i) {
        const pid_t group = message[i];
        if (group > 0 && count < kMaxGroups) {
          groups[count++] = group;
        } else if (group < 0) {
          for (size_t j = 0; j < count; ++j)
            if (groups[j] == -group) {
              groups[j] = groups[--count];
              break;
            }
        }
      }
    }
    for (size_t j = 0; j < count; ++j) ::kill(-groups[j], SIGKILL);
    ::_exit(0);
  }

  void tell(int32_t message) {
    if (write_fd_ < 0) return;
    while (::write(write_fd_, &message, sizeof message) < 0 && errno == EINTR) {
    }
  }

  int write_fd_ = -1;
};

// The child between vfork and exec: it shares the worker's memory and
// runs on its stack, so it writes nothing but its own locals and calls
// nothing but system calls (as posix_spawn's child). Signals it could get
// meanwhile are left to their defaults first: the worker has no handlers
// (it blocks SIGTERM and SIGINT for a sigwait thread, ignores SIGPIPE).
// Descriptors `fds` become 0, 2, 3 and 4.
[[noreturn]] void exec_shell_child(char* const argv[], char* const envp[], std::array<int, 4> fds) {
  ::setpgid(0, 0);
  HandlerGuard::instance().started(::getpid());
  constexpr std::array<int, 4> kTargets = {0, 2, 3, 4};
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i] == kTargets[i]) {
      ::fcntl(fds[i], F_SETFD, 0);  // dup2 onto itself would leave close-on-exec set
    } else if (::dup2(fds[i], kTargets[i]) < 0) {
      ::_exit(127);
    }
  }
  struct sigaction defaults {};
  defaults.sa_handler = SIG_DFL;
  for (const int sig : {SIGTERM, SIGINT, SIGPIPE}) ::sigaction(sig, &defaults, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::pthread_sigmask(SIG_SETMASK, &none, nullptr);  // the child has one thread: the same as sigprocmask
  ::execve(argv[0], argv, envp);
  ::_exit(127);
}

std::vector<std::string> job_environment(const Job& job) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string_view(*e).substr(0, 5) != "DUEQ_") env.emplace_back(*e);
  env.push_back("DUEQ_JOB_ID=" + job.id);
  env.push_back("DUEQ_JOB_TYPE=" + job.type);
  env.push_back("DUEQ_QUEUE=" + job.queue);
  env.push_back("DUEQ_ATTEMPT=" + std::to_string(job.attempt));
  env.push_back("DUEQ_MAX_ATTEMPTS=" + std::to_string(job.max_attempts));
  env.push_back("DUEQ_DUE_AT_MS=" + std::to_string(job.due_ms));
  env.push_back("DUEQ_RECEIVED_AT_MS=" + std::to_string(job.received_ms));
  // An environment string ends at its first NUL: a key holding one is not
  // passed, rather than passed cut short (it is in the job document).
  if (!job.key.empty() && job.key.find('\0') == std::string::npos) env.push_back("DUEQ_JOB_KEY=" + job.key);
  // The job's W3C trace context under the names OpenTelemetry's environment
  // carriers read (the worker's own, if it had any, is replaced).
  std::erase_if(env, [](const std::string& e) { return e.starts_with("TRACEPARENT=") || e.starts_with("TRACESTATE="); });
  if (!job.traceparent.empty()) env.push_back("TRACEPARENT=" + job.traceparent);
  if (!job.tracestate.empty()) env.push_back("TRACESTATE=" + job.tracestate);
  return env;
}

// `command` under /bin/sh -c in a process group of its own (a timeout
// kills the whole tree), with `stdin_fd` and `stderr_fd`, the job's facts in
// its environment and the signals the worker blocks back at their defaults.
// The command's result file is `result_fd` as its descriptor 3
// (DUEQ_RESULT_FILE=/dev/fd/3), and the pipe it reports progress on
// `progress_fd` as its descriptor 4 (DUEQ_PROGRESS_FILE=/dev/fd/4). The child registers its group with the
// guard itself, before the exec: registered by the worker after the spawn
// returned, a command could run (and finish) unregistered when the worker
// died in between.
Result<pid_t> spawn_shell(const std::string& command, const Job& job, std::array<int, 4> fds) {
  auto env = job_environment(job);
  env.push_back("DUEQ_RESULT_FILE=/dev/fd/3");
  env.push_back("DUEQ_PROGRESS_FILE=/dev/fd/4");
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string shell = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {shell.data(), dash_c.data(), cmd.data(), nullptr};
  // vfork, as posix_spawn does: fork() would copy the page tables of a
  // worker with many threads for every command (a third of the rate).
  const pid_t pid = ::vfork();
  if (pid < 0) return fail(Errc::internal, fmt::format("cannot start command: {}", errno_text(errno)));
  if (pid == 0) exec_shell_child(argv, envp.data(), fds);
  ::setpgid(pid, pid);  // also here, so a kill of the group never comes before the child's own call
  return pid;
}

enum class Ending { ran, timed_out, cancelled };

bool cancel_asked(const Job& job) { return job.cancelled != nullptr && job.cancelled->load(); }

// The worker's ends of a command's pipes, and what it read from them.
struct CommandPipes {
  UniqueFd in_write;       // its stdin: the payload
  UniqueFd err_read;       // its stderr: the tail is kept
  UniqueFd progress_read;  // its descriptor 4: progress lines
  size_t written = 0;      // payload bytes written so far
  std::string err_tail;
  std::string progress_line;   // a line not ended yet
  bool skipping_line = false;  // the line grew past kMaxProgressLine: dropped up to its end
};

constexpr size_t kMaxProgressLine = 512;

void write_payload(CommandPipes& p, const Job& job) {
  const ssize_t w = ::write(p.in_write.get(), job.payload.data() + p.written, job.payload.size() - p.written);
  if (w > 0) p.written += static_cast<size_t>(w);
  // Written, or the command closed stdin early (fine).
  if ((w < 0 && errno != EAGAIN) || p.written == job.payload.size()) p.in_write.reset();
}

void read_stderr(CommandPipes& p) {
  char buffer[4096];
  const ssize_t r = ::read(p.err_read.get(), buffer, sizeof buffer);
  if (r <= 0) {
    p.err_read.reset();
    return;
  }
  p.err_tail.append(buffer, static_cast<size_t>(r));
  if (p.err_tail.size() > kStderrTail * 2) p.err_tail.erase(0, p.err_tail.size() - kStderrTail);
}

// Each whole line read is a report (the job's latest one wins).
void read_progress(CommandPipes& p, const Job& job) {
  char buffer[4096];
  const ssize_t r = ::read(p.progress_read.get(), buffer, sizeof buffer);
  if (r <= 0) {
    p.progress_read.reset();
    return;
  }
  for (const char c : std::string_view(buffer, static_cast<size_t>(r))) {
    if (c == '\n') {
      if (!p.skipping_line)
        if (auto report = parse_progress_line(p.progress_line)) job.progress(report->percent, report->text);
      p.progress_line.clear();
      p.skipping_line = false;
    } else if (!p.skipping_line) {
      p.progress_line += c;
      if (p.progress_line.size() > kMaxProgressLine) {
        p.progress_line.clear();
        p.skipping_line = true;
      }
    }
  }
}

// Feeds the payload to the command's stdin, keeps the tail of its stderr and
// passes its progress lines on until stderr closes, the deadline passes or
// the job is cancelled.
Ending feed_and_listen(CommandPipes& p, const Job& job, int64_t deadline) {
  if (job.payload.empty()) p.in_write.reset();
  while (p.err_read.get() >= 0) {
    pollfd fds[3];
    fds[0] = {p.err_read.get(), POLLIN, 0};
    fds[1] = {p.in_write.get(), POLLOUT, 0};  // a negative fd is skipped by poll
    fds[2] = {p.progress_read.get(), POLLIN, 0};
    const int64_t left = deadline - steady_ms();
    if (left <= 0) return Ending::timed_out;
    if (cancel_asked(job)) return Ending::cancelled;
    ::poll(fds, 3, static_cast<int>(std::min<int64_t>(left, 100)));
    if (fds[1].revents & (POLLOUT | POLLERR | POLLHUP)) write_payload(p, job);
    if (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) read_progress(p, job);
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) read_stderr(p);
  }
  return Ending::ran;
}

// Reaps the command (killing its group first when it ran out of time or was
// cancelled, also while it still runs after closing stderr itself).
Ending reap(pid_t pid, Ending ending, const Job& job, int64_t deadline, int& status) {
  if (ending != Ending::ran) ::kill(-pid, SIGKILL);
  while (ending == Ending::ran) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (steady_ms() >= deadline || cancel_asked(job)) {
      ending = steady_ms() >= deadline ? Ending::timed_out : Ending::cancelled;
      ::kill(-pid, SIGKILL);
      break;
    }
    ::usleep(2000);
  }
  if (ending != Ending::ran) ::waitpid(pid, &status, 0);
  // Reaped: the group id may be reused by an unrelated process from now on.
  HandlerGuard::instance().ended(pid);
  return ending;
}

// What the command wrote to its result file: at most one byte past the
// limit is read (the handler pool refuses a longer result).
std::string result_written(int result_fd) {
  std::string out(proto::JobResult::kMaxResultBytes + 1, '\0');
  size_t have = 0;
  while (have < out.size()) {
    const ssize_t r = ::pread(result_fd, out.data() + have, out.size() - have, static_cast<off_t>(have));
    if (r <= 0) break;
    have += static_cast<size_t>(r);
  }
  out.resize(have);
  return out;
}

HandlerResult outcome_of(Ending ending, int status, int64_t timeout_ms, std::string err_tail, int result_fd) {
  if (ending == Ending::timed_out) return HandlerResult::failed(fmt::format("timed out after {} ms (command killed)", timeout_ms));
  if (ending == Ending::cancelled) return HandlerResult::failed("cancelled: the worker was stopped before the command finished");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return HandlerResult::done(result_written(result_fd));
  if (WIFEXITED(status) && WEXITSTATUS(status) == kSnoozeExitCode) {
    const int64_t delay = snooze_asked_ms(err_tail, wall_ms());
    return HandlerResult::snooze(std::chrono::milliseconds(delay), fmt::format("exit code {}: snoozed {} ms", kSnoozeExitCode, delay));
  }
  std::string reason = WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                         : fmt::format("killed by signal {}", WTERMSIG(status));
  if (err_tail.size() > kStderrTail) err_tail.erase(0, err_tail.size() - kStderrTail);
  while (!err_tail.empty() && std::isspace(static_cast<unsigned char>(err_tail.back()))) err_tail.pop_back();
  if (!err_tail.empty()) reason += "; stderr: " + err_tail;
  return HandlerResult::failed(std::move(reason));
}

// A pipe whose ends are both close-on-exec (the child gets its end by dup2).
bool open_pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  read_end = UniqueFd(fds[0]);
  write_end = UniqueFd(fds[1]);
  return true;
}

HandlerResult run_command(const std::string& command, int64_t timeout_ms, const Job& job) {
  CommandPipes p;
  UniqueFd in_read, err_write, progress_write;
  if (!open_pipe(in_read, p.in_write) || !open_pipe(p.err_read, err_write) || !open_pipe(p.progress_read, progress_write))
    return HandlerResult::failed("cannot create a pipe");
  UniqueFd result_file(::memfd_create("dueq-result", MFD_CLOEXEC));
  if (result_file.get() < 0) return HandlerResult::failed("cannot create the result file");
  auto pid = spawn_shell(command, job, {in_read.get(), err_write.get(), result_file.get(), progress_write.get()});
  if (!pid) return HandlerResult::failed(pid.error().message);
  in_read.reset();
  err_write.reset();
  progress_write.reset();
  ::fcntl(p.in_write.get(), F_SETFL, O_NONBLOCK);
  const int64_t deadline = steady_ms() + timeout_ms;
  const Ending fed = feed_and_listen(p, job, deadline);
  p.in_write.reset();
  int status = 0;
  const Ending ending = reap(*pid, fed, job, deadline, status);
  return outcome_of(ending, status, timeout_ms, std::move(p.err_tail), result_file.get());
}

}  // namespace

std::optional<ProgressReport> parse_progress_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  int64_t percent = 0;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), percent);
  if (ec != std::errc() || end == line.data()) return std::nullopt;
  std::string_view rest = line.substr(static_cast<size_t>(end - line.data()));
  if (rest.starts_with('%')) rest.remove_prefix(1);
  if (rest.empty()) return ProgressReport{percent, {}};
  if (rest.front() != ' ') return std::nullopt;
  return ProgressReport{percent, rest.substr(1)};
}

int64_t snooze_asked_ms(std::string_view tail, int64_t now_ms) {
  while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.back()))) tail.remove_suffix(1);
  const size_t line_start = tail.rfind('\n');
  const std::string_view line = line_start == std::string_view::npos ? tail : tail.substr(line_start + 1);
  constexpr std::string_view kFor = "snooze: ", kUntil = "snooze-until: ";
  if (line.starts_with(kFor)) {
    if (auto ms = parse_duration_ms(line.substr(kFor.size()))) return *ms;
  } else if (line.starts_with(kUntil)) {
    const std::string_view text = line.substr(kUntil.size());
    int64_t at = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), at);
    if (ec == std::errc() && end == text.data() + text.size() && !text.empty()) return std::max<int64_t>(0, at - now_ms);
  }
  return kDefaultSnoozeMs;
}

Handler make_exec_handler(std::string command, int64_t timeout_ms) {
  HandlerGuard::instance();  // forked now, before the worker's threads start
  return [command = std::move(command), timeout_ms](const Job& job) { return run_command(command, timeout_ms, job); };
}

}  // namespace dueq
