#include "broker/store/embedded_store.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include "broker/redis_conf.hpp"  // generated: kDeployRedisConf, deploy/redis.conf's text

namespace dueq::broker {

namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The last lines of Redis's log, for an error that says why it did not start.
std::string log_tail(const std::filesystem::path& log) {
  std::string text = read_text(log);
  size_t at = text.size();
  for (int lines = 0; lines < 4 && at > 0; ++lines) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) {
      at = 0;
      break;
    }
  }
  return text.substr(at);
}

bool answers_ping(const std::filesystem::path& socket) {
  const timeval timeout{1, 0};
  std::unique_ptr<redisContext, decltype(&redisFree)> context(redisConnectUnixWithTimeout(socket.c_str(), timeout),
                                                              &redisFree);
  if (!context || context->err != 0) return false;
  std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(
      static_cast<redisReply*>(redisCommand(context.get(), "PING")), &freeReplyObject);
  // LOADING (an AOF being read) is an error reply: not serving yet.
  return reply && reply->type == REDIS_REPLY_STATUS;
}

// Whether `pid` is a live redis-server (it may have been reused since).
bool is_redis_server(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  return read_text("/proc/" + std::to_string(pid) + "/comm").starts_with("redis-server");
}

std::string death_text(int status) {
  return WIFSIGNALED(status) ? fmt::format("was killed by signal {}", WTERMSIG(status))
                             : fmt::format("exited with {}", WEXITSTATUS(status));
}

}  // namespace

EmbeddedStore::EmbeddedStore(std::filesystem::path data_dir, std::string redis_server)
    : dir_(std::move(data_dir)), redis_server_(std::move(redis_server)) {}

std::string EmbeddedStore::config_text(const std::filesystem::path& data_dir) {
  static constexpr std::string_view kOverridden[] = {"bind", "port", "dir", "unixsocket", "unixsocketperm",
                                                    "logfile", "pidfile", "daemonize", "protected-mode"};
  std::istringstream deploy{std::string(kDeployRedisConf)};
  std::string out = "# Written by dueq-broker at every start: deploy/redis.conf, then the embedded store's own lines.\n";
  std::string line;
  while (std::getline(deploy, line)) {
    const std::string first = line.substr(0, line.find(' '));
    bool overridden = false;
    for (auto name : kOverridden) overridden = overridden || first == name;
    if (!overridden) out += line + "\n";
  }
  const std::string dir = data_dir.string();
  out += "\n# The embedded store: no TCP port, a unix socket only this user can open.\n";
  out += "port 0\n";
  out += "unixsocket " + dir + "/redis.sock\n";
  out += "unixsocketperm 700\n";
  out += "dir " + dir + "\n";
  out += "pidfile " + dir + "/redis.pid\n";
  out += "logfile " + dir + "/redis.log\n";
  out += "daemonize no\n";
  return out;
}

Result<void> EmbeddedStore::start() {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return fail(Errc::bad_argument, fmt::format("data_dir {}: {}", dir_.string(), ec.message()));
  dir_ = std::filesystem::canonical(dir_, ec);
  if (ec) return fail(Errc::bad_argument, fmt::format("data_dir {}: {}", dir_.string(), ec.message()));
  ::chmod(dir_.c_str(), 0700);
  if (socket_path().string().size() >= sizeof(sockaddr_un::sun_path))
    return fail(Errc::bad_argument, fmt::format("data_dir {} is too long for a unix socket path (at most {} bytes "
                                                "with /redis.sock)", dir_.string(), sizeof(sockaddr_un::sun_path) - 1));

  lock_ = UniqueFd(::open((dir_ / "broker.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (lock_.get() < 0) return fail(Errc::bad_argument, fmt::format("data_dir {}: cannot open broker.lock", dir_.string()));
  if (::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0)
    return fail(Errc::bad_argument, fmt::format("data_dir {} is in use by another dueq-broker", dir_.string()));

  {
    std::ofstream conf(dir_ / "redis.conf", std::ios::trunc);
    conf << config_text(dir_);
    if (!conf) return fail(Errc::bad_argument, fmt::format("data_dir {}: cannot write redis.conf", dir_.string()));
  }
  wait_for_previous();
  auto pid = spawn();
  if (!pid) return std::unexpected(pid.error());
  if (auto ok = wait_until_serving(*pid, kStartTimeoutMs, nullptr); !ok) {
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, nullptr, 0);
    return ok;
  }
  pid_ = *pid;
  spdlog::info("embedded store: redis-server (pid {}) on {}, data in {}", *pid, url(), dir_.string());
  thread_.start([this] { supervise(); });
  return {};
}

void EmbeddedStore::wait_for_previous() {
  std::string text = read_text(dir_ / "redis.pid");
  const pid_t previous = static_cast<pid_t>(std::atoi(text.c_str()));
  if (!is_redis_server(previous)) return;
  spdlog::warn("embedded store: an earlier redis-server (pid {}) of {} still runs; stopping it first", previous,
               dir_.string());
  ::kill(previous, SIGTERM);
  const int64_t deadline = steady_ms() + kStopTimeoutMs;
  while (is_redis_server(previous) && steady_ms() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Redis refuses to stop when its final save fails (a full disk, a
  // directory gone): two on one AOF must never run.
  if (is_redis_server(previous)) {
    spdlog::error("embedded store: the earlier redis-server (pid {}) did not stop within {} ms; killing it", previous,
                  kStopTimeoutMs);
    ::kill(previous, SIGKILL);
    while (is_redis_server(previous)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<pid_t> EmbeddedStore::spawn() {
  const std::string conf = (dir_ / "redis.conf").string();
  const std::string out = (dir_ / "redis.log").string();
  const int log_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    return fail(Errc::internal, "embedded store: fork failed: " + errno_text(errno));
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec. Redis goes when this
    // process goes, in a process group of its own so that a terminal's
    // Ctrl-C reaches the broker alone (which then drains into Redis).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);  // the only thread of the child
    ::signal(SIGPIPE, SIG_DFL);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    if (log_fd >= 0) {
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
    }
    ::close_range(3, ~0U, 0);
    char* const argv[] = {const_cast<char*>(redis_server_.c_str()), const_cast<char*>(conf.c_str()), nullptr};
    ::execvp(argv[0], argv);
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  return pid;
}

Result<void> EmbeddedStore::wait_until_serving(pid_t pid, int64_t timeout_ms, int* exit_status) {
  const int64_t deadline = steady_ms() + timeout_ms;
  while (true) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      if (exit_status != nullptr) *exit_status = status;
      const std::string why = WIFEXITED(status) && WEXITSTATUS(status) == 127
                                  ? fmt::format("{} not found (install the redis-server package)", redis_server_)
                                  : fmt::format("redis-server {} at start: {}", death_text(status), log_tail(dir_ / "redis.log"));
      return fail(Errc::unavailable, "embedded store: " + why);
    }
    if (answers_ping(socket_path())) return {};
    if (steady_ms() > deadline || thread_.stopping())
      return fail(Errc::unavailable, fmt::format("embedded store: redis-server did not serve on {} within {} ms",
                                                 url(), timeout_ms));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Every death of Redis, at start or while loading included, is followed by
// one log line and a restart after a back-off: 100 ms, doubling while it
// keeps dying, back to 100 ms once one ran for 30 s.
void EmbeddedStore::supervise() {
  int64_t delay_ms = 100;
  int64_t started_ms = steady_ms();
  while (thread_.wait_for(std::chrono::milliseconds(50))) {
    const pid_t pid = pid_.load();
    if (pid > 0) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) != pid) continue;
      spdlog::error("embedded store: redis-server (pid {}) {}; starting it again in {} ms", pid, death_text(status),
                    delay_ms);
      pid_ = -1;
    }
    if (steady_ms() - started_ms > 30'000) delay_ms = 100;
    if (pid > 0 || restarts_.load() > 0) {
      if (!thread_.wait_for(std::chrono::milliseconds(delay_ms))) return;
      delay_ms = std::min(delay_ms * 2, kMaxRestartDelayMs);
    }
    start_again();
    started_ms = steady_ms();
  }
}

// One restart: the new pid is published at once (so stop() can end it),
// and a process that dies before it serves is reaped here and left at -1,
// which the supervisor's next pass restarts.
void EmbeddedStore::start_again() {
  wait_for_previous();
  auto spawned = spawn();
  restarts_.fetch_add(1);
  if (!spawned) {
    spdlog::error("{}; trying again", spawned.error().message);
    return;
  }
  pid_ = *spawned;
  int exit_status = -1;
  auto ok = wait_until_serving(*spawned, kStartTimeoutMs, &exit_status);
  if (ok) {
    spdlog::info("embedded store: redis-server (pid {}) serves again", *spawned);
    return;
  }
  spdlog::error("{}", ok.error().message);
  if (exit_status != -1) pid_.compare_exchange_strong(*spawned, -1);
}

void EmbeddedStore::stop() {
  thread_.stop();
  const pid_t pid = pid_.exchange(-1);
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  const int64_t deadline = steady_ms() + kStopTimeoutMs;
  while (::waitpid(pid, nullptr, WNOHANG) == 0) {
    if (steady_ms() > deadline) {
      spdlog::error("embedded store: redis-server (pid {}) did not stop within {} ms; killing it", pid, kStopTimeoutMs);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  spdlog::info("embedded store: redis-server stopped");
}

}  // namespace dueq::broker
