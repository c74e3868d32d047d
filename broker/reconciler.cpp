#include "broker/reconciler.hpp"

#include <spdlog/spdlog.h>

#include "broker/admin.hpp"
#include "broker/auditor.hpp"

namespace dueq::broker {

void Reconciler::start() {
  if (interval_ms_ <= 0 || thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void Reconciler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Reconciler::run() {
  ScriptRegistry redis(address_);
  // Paced together with admin work: the event loop keeps most of Redis's time.
  redis.set_budget(budget_);
  redis.set_stop_flag(&stopping_);
  while (true) {
    {
      std::unique_lock lock(mutex_);
      if (wake_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [&] { return stopping_.load(); })) return;
    }
    if (!redis.connected())
      if (auto ok = redis.connect(); !ok) continue;  // the main loop reports Redis outages
    auto queues = known_queues(redis);
    if (!queues) {
      redis.disconnect();
      continue;
    }
    for (const auto& queue : *queues) {
      auto report = audit_queue(redis, queue, /*repair=*/true);
      if (!report) {
        if (stopping_) return;
        spdlog::warn("reconciler: audit of '{}' failed: {}", queue, report.error().message);
        redis.disconnect();
        break;
      }
      for (const auto& id : report->repaired) spdlog::warn("reconciler: queue '{}': removed dangling entry {}", queue, id);
      if (report->counts.imbalance() != 0)
        spdlog::error("reconciler: queue '{}': accepted jobs do not balance (off by {})", queue, report->counts.imbalance());
      for (const auto& [id, what] : report->problems) spdlog::error("reconciler: queue '{}': job {}: {}", queue, id, what);
    }
  }
}

}  // namespace dueq::broker
