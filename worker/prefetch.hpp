#pragma once
// How many jobs a worker buffers beyond its running handlers when no
// prefetch is configured (WorkerOptions::prefetch = 0).
#include <algorithm>
#include <cstdint>

namespace dueq::worker {

// About how long a finished job's slot takes to be filled again: the
// worker's result, a broker round with Redis, the next TASKS frame.
inline constexpr double kRefillMicros = 4'000;
// The most jobs an adaptive worker holds (running and buffered), under the
// broker's default max_worker_capacity (1,024).
inline constexpr uint32_t kMaxAdaptiveCapacity = 1'000;

// Enough buffered jobs to keep every handler busy while slots are refilled
// (concurrency x refill time / handler time), but never fewer than
// `concurrency`: short handlers get a deep buffer (a no-op handler drains a
// shallow one within a round trip and then waits), long ones a shallow one
// (a buffered job waits behind a whole handler run). Without a measured
// handler time yet (mean_handler_us <= 0) it is `concurrency`.
inline uint32_t adaptive_prefetch(uint32_t concurrency, double mean_handler_us) {
  if (mean_handler_us <= 0) return concurrency;
  const double wanted = concurrency * kRefillMicros / mean_handler_us;
  const double most = concurrency < kMaxAdaptiveCapacity ? kMaxAdaptiveCapacity - concurrency : 0;
  return static_cast<uint32_t>(std::max<double>(concurrency, std::min(wanted, most)));
}

}  // namespace dueq::worker
