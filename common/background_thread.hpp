#pragma once
// The one shape of the broker's background loops (Admin, Reconciler, the
// embedded store's supervisor, the sentinel watch), as
// Asynq gives each of its own: start() runs a body on a thread of its own;
// stop() raises the stop flag, wakes a body that waits, and joins. The body
// waits through wait() / wait_for() so that stop() always ends the wait, and
// passes stop_flag() to its RedisClient so a long Redis walk ends at its
// next step too.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace dueq {

class BackgroundThread {
 public:
  BackgroundThread() = default;
  BackgroundThread(const BackgroundThread&) = delete;
  BackgroundThread& operator=(const BackgroundThread&) = delete;
  ~BackgroundThread() { stop(); }

  // Runs `body` on the thread; nothing when it runs already.
  void start(std::function<void()> body) {
    if (thread_.joinable()) return;
    stopping_ = false;
    thread_ = std::thread(std::move(body));
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  bool stopping() const { return stopping_; }
  const std::atomic<bool>* stop_flag() const { return &stopping_; }
  // Guards what the body shares with other threads.
  std::mutex& mutex() { return mutex_; }
  // Wakes the body from wait().
  void notify() { wake_.notify_one(); }
  // Under `lock` (of mutex()): waits until `ready()` or stop(); false when stopping.
  template <typename Ready>
  bool wait(std::unique_lock<std::mutex>& lock, Ready ready) {
    wake_.wait(lock, [&] { return stopping_.load() || ready(); });
    return !stopping_;
  }
  // Under `lock`: waits until `ready()`, stop() or `period` passed; false when stopping.
  template <typename Ready>
  bool wait_for(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds period, Ready ready) {
    wake_.wait_for(lock, period, [&] { return stopping_.load() || ready(); });
    return !stopping_;
  }
  // Sleeps `period` or until stop(); false when stopping.
  bool wait_for(std::chrono::milliseconds period) {
    std::unique_lock lock(mutex_);
    return !wake_.wait_for(lock, period, [&] { return stopping_.load(); });
  }

 private:
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};
};

}  // namespace dueq
