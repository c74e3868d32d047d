#include "broker/admin/reconciler.hpp"

#include <spdlog/spdlog.h>

#include "broker/admin/auditor.hpp"
#include "broker/admin/job_lookup.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

void Reconciler::start(uint64_t epoch) {
  epoch_ = epoch;
  if (interval_ms_ > 0) thread_.start([this] { run(); });
}

void Reconciler::run() {
  RedisClient redis(address_);
  redis.set_epoch(epoch_);
  // Paced together with admin work: the event loop keeps most of Redis's time.
  redis.set_budget(budget_);
  redis.set_stop_flag(thread_.stop_flag());
  redis.set_name("dueq-reconciler");
  while (thread_.wait_for(std::chrono::milliseconds(interval_ms_))) {
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
        if (thread_.stopping()) return;
        spdlog::warn("reconciler: audit of '{}' failed: {}", loggable(queue), report.error().message);
        redis.disconnect();
        break;
      }
      for (const auto& id : report->repaired) spdlog::warn("reconciler: queue '{}': removed dangling entry {}", loggable(queue), loggable(id));
      if (report->counts.imbalance() != 0)
        spdlog::error("reconciler: queue '{}': accepted jobs do not balance (off by {})", loggable(queue),
                      report->counts.imbalance());
      for (const auto& [id, what] : report->problems) spdlog::error("reconciler: queue '{}': job {}: {}", loggable(queue), loggable(id), what);
    }
  }
}

}  // namespace dueq::broker
