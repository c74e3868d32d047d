// The worker's default buffer (worker/prefetch.hpp): deep for short
// handlers, the concurrency for long ones, bounded either way.
#include <gtest/gtest.h>

#include "worker/prefetch.hpp"

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
