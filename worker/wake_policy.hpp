#pragma once
// How many idle handler threads a worker wakes for jobs that just arrived.
// Waking a thread costs a futex call and a context switch on both sides
// (some 5-10 us of CPU on a small VM): for a no-op handler that is more
// than the job itself, so short jobs go to fewer threads that each run
// several, and long jobs get a thread each.
#include <algorithm>
#include <cmath>
#include <cstddef>

namespace dueq::worker {

// Expected handler time a woken thread should have in front of it.
inline constexpr double kWorkPerWakeMicros = 100;
// A job that waited this long for a thread while threads sat idle (a short
// handler average, then one long job) gets one woken for it.
inline constexpr int64_t kMaxWaitForThreadMicros = 1'000;

// Threads to wake for `arrived` new jobs with `idle` threads asleep: enough
// to share kWorkPerWakeMicros of expected work each, at least one, at most
// one per job. Without a measured handler time (mean_handler_us <= 0) one
// per job.
inline size_t threads_to_wake(size_t arrived, size_t idle, double mean_handler_us) {
  const size_t most = std::min(arrived, idle);
  if (most == 0 || mean_handler_us <= 0) return most;
  const double wanted = std::ceil(static_cast<double>(arrived) * mean_handler_us / kWorkPerWakeMicros);
  return std::clamp<size_t>(static_cast<size_t>(wanted), 1, most);
}

}  // namespace dueq::worker
