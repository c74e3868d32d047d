#pragma once
// Background job: every `interval` it audits every known queue on its own
// Redis connection (paced like admin work), repairs dangling entries and
// logs what it cannot repair. start() launches the thread; stop() (or the
// destructor) ends it at the audit's next step.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <memory>
#include <thread>

#include "broker/redis_budget.hpp"
#include "common/redis_url.hpp"

namespace dueq::broker {

class Reconciler {
 public:
  // `budget`: shared with admin work (one share of Redis's time for both).
  Reconciler(RedisAddress address, int64_t interval_ms, std::shared_ptr<RedisBudget> budget)
      : address_(std::move(address)), interval_ms_(interval_ms), budget_(std::move(budget)) {}
  ~Reconciler() { stop(); }

  void start();
  void stop();

 private:
  void run();

  RedisAddress address_;
  int64_t interval_ms_;
  std::shared_ptr<RedisBudget> budget_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};
};

}  // namespace dueq::broker
