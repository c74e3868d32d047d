// Log lines about peers: escaped, capped, rate-limited.
#include <gtest/gtest.h>

#include "common/logging.hpp"

using namespace dueq;

TEST(Loggable, PeerTextCannotForgeALineOrATerminalEscape) {
  EXPECT_EQ(loggable("worker-1"), "worker-1");
  EXPECT_EQ(loggable("w\n2026-01-01 critical owned\x1b[31m"), "w\\x0a2026-01-01 critical owned\\x1b[31m");
  EXPECT_EQ(loggable("a\\x0a"), "a\\x5cx0a") << "a literal backslash is escaped too, so no output is ambiguous";
  EXPECT_EQ(loggable(std::string("\xff\x00", 2)), "\\xff\\x00");
}

TEST(Loggable, LongPeerTextIsCut) {
  const std::string host(1 << 20, 'h');
  const std::string shown = loggable(host);
  // Compared in two parts: GCC 12 at -O2 takes `std::string(64, 'h') + "..."`
  // for an out-of-bounds copy (-Warray-bounds, a known false positive).
  EXPECT_EQ(shown.substr(0, 64), std::string(64, 'h'));
  EXPECT_EQ(shown.substr(64), "... (1048576 bytes)");
}

TEST(LogLimiter, OneLinePerKeyPerIntervalWithTheHeldBackCount) {
  LogLimiter limiter(10'000, 100, 100);
  ASSERT_EQ(limiter.admit("peer", 0), std::optional<uint64_t>(0));
  EXPECT_FALSE(limiter.admit("peer", 1));
  EXPECT_FALSE(limiter.admit("peer", 9'999));
  EXPECT_EQ(limiter.admit("other", 9'999), std::optional<uint64_t>(0)) << "keys are limited separately";
  EXPECT_EQ(limiter.admit("peer", 10'000), std::optional<uint64_t>(2));
}

TEST(LogLimiter, AFloodOfKeysIsCappedPerSecond) {
  LogLimiter limiter(10'000, 20, 1'000'000);
  int written = 0;
  for (int i = 0; i < 100'000; ++i) written += limiter.admit("peer-" + std::to_string(i), i / 100).has_value();
  // 100,000 peers within one second: 20 lines.
  EXPECT_EQ(written, 20);
}

TEST(LogLimiter, KeysKeptAreBounded) {
  LogLimiter limiter(10'000, 1'000'000, 10);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter.admit("peer-" + std::to_string(i), 0));
  // The table was cleared when full, so an early key is admitted again.
  EXPECT_TRUE(limiter.admit("peer-0", 1));
}
