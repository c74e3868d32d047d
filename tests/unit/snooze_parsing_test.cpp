// How a snooze's delay is read from what handlers say: an HTTP answer's
// Retry-After (seconds or an HTTP date) and an exec command's last stderr
// line (`snooze: DURATION`, `snooze-until: UNIX_MS`).
#include <gtest/gtest.h>

#include "worker/exec_handler.hpp"
#include "worker/http_handler.hpp"

using namespace dueq;

TEST(Snooze, RetryAfterIsSecondsOrAnHttpDate) {
  // 2026-10-21T07:28:00Z
  const int64_t at = 1792567680000;
  EXPECT_EQ(retry_after_ms("120", at), 120'000);
  EXPECT_EQ(retry_after_ms(" 0 ", at), 0);
  EXPECT_EQ(retry_after_ms("Wed, 21 Oct 2026 07:28:30 GMT", at), 30'000);
  EXPECT_EQ(retry_after_ms("Wed, 21 Oct 2026 07:27:00 GMT", at), 0) << "a date gone by: at once";
  for (const char* bad : {"", "soon", "-5", "1.5", "99999999999999", "Wed, 21 Oct 2026 07:28:30", "21 Oct 2026"})
    EXPECT_FALSE(retry_after_ms(bad, at)) << bad;
}

TEST(Snooze, AnExecCommandNamesItsDelayOnItsLastStderrLine) {
  const int64_t now = 1'000'000;
  EXPECT_EQ(snooze_asked_ms("working\nsnooze: 30s\n", now), 30'000);
  EXPECT_EQ(snooze_asked_ms("snooze: 250ms", now), 250);
  EXPECT_EQ(snooze_asked_ms("snooze-until: 1005000\n\n", now), 5'000);
  EXPECT_EQ(snooze_asked_ms("snooze-until: 10", now), 0) << "a time gone by: at once";
  for (const char* none : {"", "busy", "snooze: 30s\nthen something else", "snooze: often", "snooze-until: tomorrow",
                           "snooze 30s"})
    EXPECT_EQ(snooze_asked_ms(none, now), kDefaultSnoozeMs) << none;
}
