// Cron expressions: the grammar, the day rule, and daylight-saving days in
// two time zones (the spring gap and the autumn's repeated hour).
#include <gtest/gtest.h>

#include <date/date.h>

#include "common/cron.hpp"

using namespace dueq;

namespace {

// Unix ms of a UTC time "2026-03-29 01:00:00".
int64_t utc(const char* text) {
  std::istringstream in(text);
  date::sys_seconds t{};
  in >> date::parse("%F %T", t);
  EXPECT_FALSE(in.fail()) << text;
  return t.time_since_epoch().count() * 1000;
}

std::string iso(int64_t ms) { return date::format("%F %T", date::sys_seconds{std::chrono::seconds{ms / 1000}}); }

// The first `n` ticks after `from` (UTC text), as UTC text.
std::vector<std::string> ticks(const CronSchedule& s, const char* from, int n) {
  std::vector<std::string> out;
  int64_t at = utc(from);
  for (int i = 0; i < n; ++i) {
    auto next = s.next_after(at);
    if (!next) break;
    out.push_back(iso(*next));
    at = *next;
  }
  return out;
}

CronSchedule parsed(const char* expression, const char* zone = "UTC") {
  auto s = CronSchedule::parse(expression, zone);
  EXPECT_TRUE(s) << expression << ": " << (s ? "" : s.error().message);
  return s ? *s : *CronSchedule::parse("* * * * * *");
}

}  // namespace

TEST(Cron, FieldsStepsRangesListsAndNames) {
  EXPECT_EQ(ticks(parsed("*/15 * * * * *"), "2026-01-01 00:00:07", 3),
            (std::vector<std::string>{"2026-01-01 00:00:15", "2026-01-01 00:00:30", "2026-01-01 00:00:45"}));
  EXPECT_EQ(ticks(parsed("0 30 9-17/4 * * MON-FRI"), "2026-11-27 12:00:00", 3),  // a Friday
            (std::vector<std::string>{"2026-11-27 13:30:00", "2026-11-27 17:30:00", "2026-11-30 09:30:00"}));
  EXPECT_EQ(ticks(parsed("5 4 * * sun"), "2026-11-25 00:00:00", 1), (std::vector<std::string>{"2026-11-29 04:05:00"}))
      << "five fields: the second is 0";
  EXPECT_EQ(ticks(parsed("0 0 0 1 JAN,jul ?"), "2026-03-01 00:00:00", 2),
            (std::vector<std::string>{"2026-07-01 00:00:00", "2027-01-01 00:00:00"}));
  EXPECT_EQ(ticks(parsed("@hourly"), "2026-01-01 10:59:59", 1), (std::vector<std::string>{"2026-01-01 11:00:00"}));
  EXPECT_EQ(ticks(parsed("0 0 12 29 2 *"), "2026-01-01 00:00:00", 1), (std::vector<std::string>{"2028-02-29 12:00:00"}));
  EXPECT_EQ(ticks(parsed("0 0 0 * * 7"), "2026-11-25 00:00:00", 1), (std::vector<std::string>{"2026-11-29 00:00:00"}))
      << "7 is Sunday too";
  EXPECT_EQ(ticks(parsed("10/20 * * * * *"), "2026-01-01 00:00:00", 3),
            (std::vector<std::string>{"2026-01-01 00:00:10", "2026-01-01 00:00:30", "2026-01-01 00:00:50"}));
}

// Both day fields restricted: either matches (Vixie cron).
TEST(Cron, DayOfMonthOrDayOfWeekWhenBothAreRestricted) {
  EXPECT_EQ(ticks(parsed("0 0 0 13 * FRI"), "2026-11-01 00:00:00", 4),
            (std::vector<std::string>{"2026-11-06 00:00:00", "2026-11-13 00:00:00", "2026-11-20 00:00:00",
                                      "2026-11-27 00:00:00"}));
  EXPECT_EQ(ticks(parsed("0 0 0 13 * *"), "2026-11-01 00:00:00", 1), (std::vector<std::string>{"2026-11-13 00:00:00"}));
}

TEST(Cron, MalformedExpressionsAndZonesAreRefusedNamingTheField) {
  struct Bad {
    const char* expression;
    const char* says;
  };
  for (const Bad& b : {Bad{"", "expected 6 fields"}, Bad{"* * * * *  * *", "found 7"}, Bad{"60 * * * * *", "second: 60"},
                       Bad{"* * 24 * * *", "hour: 24"}, Bad{"* * * 0 * *", "day of month: 0"},
                       Bad{"* * * * 13 *", "month: 13"}, Bad{"* * * * * 8", "day of week: 8"},
                       Bad{"*/0 * * * * *", "step"}, Bad{"5-1 * * * * *", "backwards"}, Bad{"1,,2 * * * * *", "empty"},
                       Bad{"x * * * * *", "not a number"}, Bad{"* * * * FOO *", "not a number or a name"},
                       Bad{"? * * * * *", "only for the day fields"}, Bad{"0 0 0 30 2 *", "never matches"},
                       Bad{"0 0 0 31 4,6,9,11 *", "never matches"}, Bad{"@fortnightly", "unknown macro"},
                       Bad{"-1 * * * * *", "second"}, Bad{"1-2-3 * * * * *", "second"}}) {
    auto s = CronSchedule::parse(b.expression);
    ASSERT_FALSE(s) << b.expression;
    EXPECT_NE(s.error().message.find(b.says), std::string::npos) << b.expression << ": " << s.error().message;
  }
  auto zone = CronSchedule::parse("* * * * * *", "Mars/Olympus_Mons");
  ASSERT_FALSE(zone);
  EXPECT_NE(zone.error().message.find("unknown time zone"), std::string::npos);
  EXPECT_FALSE(CronSchedule::parse(std::string(300, '*')));
}

// Europe/Berlin, 29 March 2026: 02:00 CET becomes 03:00 CEST. A 02:30 job
// runs once that day, at 03:00 CEST (01:00 UTC), and at 02:30 on the days
// around it.
TEST(Cron, ALocalTimeInTheSpringGapRunsOnceAtTheGapsEnd) {
  EXPECT_EQ(ticks(parsed("0 30 2 * * *", "Europe/Berlin"), "2026-03-27 12:00:00", 3),
            (std::vector<std::string>{"2026-03-28 01:30:00", "2026-03-29 01:00:00", "2026-03-30 00:30:00"}));
  // America/New_York, 8 March 2026: 02:00 EST becomes 03:00 EDT (07:00 UTC).
  EXPECT_EQ(ticks(parsed("0 30 2 * * *", "America/New_York"), "2026-03-07 12:00:00", 3),
            (std::vector<std::string>{"2026-03-08 07:00:00", "2026-03-09 06:30:00", "2026-03-10 06:30:00"}));
  // Every 20 minutes: the gap's times collapse into the one at its end.
  EXPECT_EQ(ticks(parsed("0 */20 * * * *", "Europe/Berlin"), "2026-03-29 00:30:00", 4),
            (std::vector<std::string>{"2026-03-29 00:40:00", "2026-03-29 01:00:00", "2026-03-29 01:20:00",
                                      "2026-03-29 01:40:00"}));
}

// Europe/Berlin, 25 October 2026: 03:00 CEST becomes 02:00 CET, so 02:00 to
// 02:59 happens twice. A 02:30 job runs once, at the first 02:30 (00:30
// UTC), not again an hour later.
TEST(Cron, ALocalTimeInTheRepeatedAutumnHourRunsOnce) {
  EXPECT_EQ(ticks(parsed("0 30 2 * * *", "Europe/Berlin"), "2026-10-23 12:00:00", 3),
            (std::vector<std::string>{"2026-10-24 00:30:00", "2026-10-25 00:30:00", "2026-10-26 01:30:00"}));
  // Asked during the second 02:00-02:59 (01:15 UTC), the next tick is not
  // the 02:30 that already ran.
  EXPECT_EQ(ticks(parsed("0 30 2 * * *", "Europe/Berlin"), "2026-10-25 01:15:00", 1),
            (std::vector<std::string>{"2026-10-26 01:30:00"}));
  // America/New_York, 1 November 2026: 01:00-01:59 happens twice.
  EXPECT_EQ(ticks(parsed("0 30 1 * * *", "America/New_York"), "2026-10-31 12:00:00", 2),
            (std::vector<std::string>{"2026-11-01 05:30:00", "2026-11-02 06:30:00"}));
  // Every second through the repeated hour: each local second once.
  auto every_second = parsed("* * * * * *", "Europe/Berlin");
  EXPECT_EQ(ticks(every_second, "2026-10-25 00:59:58", 3),
            (std::vector<std::string>{"2026-10-25 00:59:59", "2026-10-25 02:00:00", "2026-10-25 02:00:01"}));
}

TEST(Cron, TickIdsNameTheEntryAndTheTickInUtc) {
  EXPECT_EQ(cron_tick_id("nightly", utc("2026-12-01 03:00:00")), "nightly@2026-12-01T03:00:00Z");
}
