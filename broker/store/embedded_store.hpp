#pragma once
// The embedded store: with no Redis address the broker runs its own
// redis-server, with deploy/redis.conf's settings, listening only on a unix
// socket under the data directory (mode 700: this user only). A thread
// supervises it: started before the broker connects, started again when it
// dies (the broker reconnects as it does to any Redis), stopped with SIGTERM
// when the broker exits, so its AOF holds every write it confirmed. Redis
// gets SIGTERM too when the broker is killed (the parent-death signal).
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/background_thread.hpp"
#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace dueq::broker {

class EmbeddedStore {
 public:
  explicit EmbeddedStore(std::filesystem::path data_dir, std::string redis_server = "redis-server");
  ~EmbeddedStore() { stop(); }
  EmbeddedStore(const EmbeddedStore&) = delete;
  EmbeddedStore& operator=(const EmbeddedStore&) = delete;

  // Creates the directory (mode 700), takes its lock (one broker per data
  // directory), writes redis.conf, starts redis-server and waits until its
  // socket accepts connections (at most kStartTimeoutMs).
  Result<void> start();
  // SIGTERM, then waits for Redis to write its AOF and exit.
  void stop();

  // The broker's Redis URL: the unix socket.
  std::string url() const { return socket_path().string(); }
  std::filesystem::path socket_path() const { return dir_ / "redis.sock"; }
  // The running redis-server's pid, or -1 (also written to DIR/redis.pid).
  pid_t pid() const { return pid_.load(); }
  // Restarts after the first start (each attempt, failed ones included).
  int restarts() const { return restarts_.load(); }

  // deploy/redis.conf with what the embedded store overrides (no TCP port,
  // the unix socket, the directory, the log file) in place of those lines.
  static std::string config_text(const std::filesystem::path& data_dir);

  static constexpr int64_t kStartTimeoutMs = 30'000;  // an AOF of a few GB takes a while to load
  static constexpr int64_t kStopTimeoutMs = 60'000;
  static constexpr int64_t kMaxRestartDelayMs = 5'000;

 private:
  Result<pid_t> spawn();
  // Waits until the socket answers PING, or the process exited (then reaped,
  // its wait status in *exit_status when given).
  Result<void> wait_until_serving(pid_t pid, int64_t timeout_ms, int* exit_status);
  // A redis-server left from an earlier broker of this directory (killed
  // with it, still writing its AOF) is waited for before a new one starts.
  void wait_for_previous();
  void supervise();
  void start_again();

  std::filesystem::path dir_;
  std::string redis_server_;
  UniqueFd lock_;
  BackgroundThread thread_;
  std::atomic<pid_t> pid_{-1};
  std::atomic<int> restarts_{0};
};

}  // namespace dueq::broker
