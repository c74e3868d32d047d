#pragma once
// Test helpers that start real processes (redis-server, dueq binaries) and
// always stop them: every Process is killed and reaped in its destructor.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace dueq::testing {

class Process {
 public:
  // Starts argv[0] (searched in PATH) with stdout and stderr appended to `log`.
  // It is killed if the test process dies first (a crash skips destructors):
  // setpriv sets the parent-death signal and then becomes argv[0], same pid.
  Process(std::vector<std::string> argv, const std::string& log, std::vector<std::string> extra_env = {}) {
    argv.insert(argv.begin(), {"setpriv", "--pdeathsig", "KILL", "--"});
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    std::vector<std::string> env;
    // An extra NAME=value replaces the inherited NAME (getenv reads the first).
    auto name_of = [](std::string_view e) { return e.substr(0, e.find('=') + 1); };
    for (char** e = environ; *e; ++e) {
      const bool replaced = std::any_of(extra_env.begin(), extra_env.end(),
                                        [&](const std::string& x) { return name_of(x) == name_of(*e); });
      if (!replaced) env.emplace_back(*e);
    }
    for (auto& e : extra_env) env.push_back(e);
    std::vector<char*> envp, args;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    if (posix_spawnp(&pid_, args[0], &actions, &attr, args.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  ~Process() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  void signal(int signo) const {
    if (pid_ > 0) ::kill(pid_, signo);  // never kill(-1): a spawn that failed left pid_ at -1
  }

  // Waits for the exit; returns the exit code, 128+signal, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    if (exited_) return status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int raw = 0;
      if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
        exited_ = true;
        status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  bool running() {
    if (exited_) return false;
    int raw = 0;
    if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
      exited_ = true;
      status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    }
    return !exited_;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = -1;
};

}  // namespace dueq::testing
