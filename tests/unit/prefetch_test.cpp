// The worker's default buffer (worker/prefetch.hpp): deep for short
// handlers, the concurrency for long ones, bounded either way.
#include <gtest/gtest.h>

#include "worker/prefetch.hpp"
#include "worker/wake_policy.hpp"

using dueq::worker::adaptive_prefetch;

TEST(AdaptivePrefetch, ShortHandlersGetADeepBufferUpToTheCap) {
  EXPECT_EQ(adaptive_prefetch(32, 5), 1'000u - 32) << "a no-op handler: as deep as the cap allows";
  EXPECT_EQ(adaptive_prefetch(32, 1'000), 128u) << "1 ms handlers: 32 x 4 ms / 1 ms";
}

TEST(AdaptivePrefetch, LongHandlersOrNoMeasurementGetTheConcurrency) {
  EXPECT_EQ(adaptive_prefetch(32, 50'000), 32u);
  EXPECT_EQ(adaptive_prefetch(32, 0), 32u) << "nothing measured yet";
  EXPECT_EQ(adaptive_prefetch(2'000, 5), 2'000u) << "never below the concurrency, even past the cap";
}

// Waking a handler thread costs more than a no-op job: short jobs share
// threads, long ones get one each (worker/wake_policy.hpp).
TEST(ThreadsToWake, ShortJobsShareOneThreadLongOnesGetOneEach) {
  using dueq::worker::threads_to_wake;
  EXPECT_EQ(threads_to_wake(11, 32, 2), 1u) << "11 no-op jobs: one thread runs them all";
  EXPECT_EQ(threads_to_wake(11, 32, 30), 4u) << "330 us of work: a thread per 100 us";
  EXPECT_EQ(threads_to_wake(11, 32, 5'000), 11u) << "5 ms jobs: one thread each";
  EXPECT_EQ(threads_to_wake(11, 3, 5'000), 3u) << "never more than are idle";
}

TEST(ThreadsToWake, UnmeasuredHandlersOrNoIdleThreads) {
  using dueq::worker::threads_to_wake;
  EXPECT_EQ(threads_to_wake(11, 32, 0), 11u) << "nothing measured yet: one per job";
  EXPECT_EQ(threads_to_wake(11, 0, 2), 0u);
  EXPECT_EQ(threads_to_wake(0, 32, 2), 0u);
}
