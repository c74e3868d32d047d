#pragma once
// Background job: every `interval` it audits every known queue on its own
// Redis connection (paced like admin work), repairs dangling entries and
// logs what it cannot repair. start() launches the thread; stop() (or the
// destructor) ends it at the audit's next step.
#include <cstdint>
#include <memory>

#include "common/background_thread.hpp"
#include "broker/store/redis_budget.hpp"
#include "common/redis_url.hpp"

namespace dueq::broker {

class Reconciler {
 public:
  // `budget`: shared with admin work (one share of Redis's time for both).
  Reconciler(RedisAddress address, int64_t interval_ms, std::shared_ptr<RedisBudget> budget)
      : address_(std::move(address)), interval_ms_(interval_ms), budget_(std::move(budget)) {}
  ~Reconciler() { stop(); }

  // `epoch`: the leader's, which its repairs are fenced with.
  void start(uint64_t epoch);
  void stop() { thread_.stop(); }

 private:
  void run();

  RedisAddress address_;
  int64_t interval_ms_;
  uint64_t epoch_ = 0;
  std::shared_ptr<RedisBudget> budget_;
  BackgroundThread thread_;
};

}  // namespace dueq::broker
