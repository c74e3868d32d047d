// Log lines about peers: escaped, capped, rate-limited.
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

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

// Two processes logging to one pipe (a broker and a worker started from one
// shell): every line arrives whole, and colour codes only where asked for.
TEST(WholeLineSink, LinesOfTwoProcessesSharingAPipeNeverInterleave) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  constexpr int kLines = 2'000;
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      spdlog::logger logger(fmt::format("p{}", p), dueq::whole_line_sink(fds[1], p == 1));
      logger.set_pattern("%n %^%l%$ %v");
      const std::string filler(100, static_cast<char>('a' + p));
      for (int i = 0; i < kLines; ++i) logger.info("{} {}", i, filler);
      ::_exit(0);
    }
    children.push_back(pid);
  }
  ::close(fds[1]);
  std::string all;
  char buffer[65536];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) all.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  for (const pid_t pid : children) ::waitpid(pid, nullptr, 0);
  std::istringstream lines(all);
  int plain = 0, colored = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line == fmt::format("p0 info {} {}", plain, std::string(100, 'a'))) {
      ++plain;
    } else if (line == fmt::format("p1 \033[32minfo\033[m {} {}", colored, std::string(100, 'b'))) {
      ++colored;
    } else {
      ADD_FAILURE() << "a line cut or mixed: " << line.substr(0, 80);
      break;
    }
  }
  EXPECT_EQ(plain, kLines);
  EXPECT_EQ(colored, kLines);
}
