#pragma once
// Cron expressions with seconds, in a time zone with its daylight-saving
// rules (the system's tz database through Howard Hinnant's date library,
// Debian's libhowardhinnant-date-dev).
//
//   second minute hour day-of-month month day-of-week
//
// Five fields leave the second at 0. Each field is `*`, a value, a range
// `a-b`, a step `*/n`, `a/n` or `a-b/n`, or a comma list of these; months
// and days take names (JAN, MON; 0 and 7 are Sunday); `?` is `*` in the day
// fields. @yearly, @monthly, @weekly, @daily, @hourly name the usual ones.
// Day of month and day of week, both restricted, match when either does
// (as in Vixie cron).
//
// Daylight saving: a local time that does not exist (02:30 on the day
// clocks go forward) fires once at the end of the gap (03:00), so a daily
// job is never skipped; a local time that happens twice (01:30 on the day
// they go back) fires once, at its first occurrence.
#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace date {
class time_zone;
}

namespace dueq {

class CronSchedule {
 public:
  static constexpr size_t kMaxExpressionBytes = 256;
  // Refuses what is malformed, out of range, or never matches.
  static Result<CronSchedule> parse(std::string_view expression, std::string_view time_zone = "UTC");

  // The first tick strictly after `after_ms` (Unix ms; ticks fall on whole
  // seconds), or nullopt when none comes within kHorizonYears.
  std::optional<int64_t> next_after(int64_t after_ms) const;

  const std::string& expression() const { return expression_; }
  const std::string& time_zone() const { return time_zone_name_; }

  static constexpr int kHorizonYears = 5;

 private:
  CronSchedule() = default;
  // The first local time (seconds since the local epoch) at or after
  // `local_s` that the fields match, or nullopt past `limit_local_s`.
  std::optional<int64_t> next_local_match(int64_t local_s, int64_t limit_local_s) const;
  bool day_matches(unsigned day_of_month, unsigned weekday) const;

  std::string expression_;
  std::string time_zone_name_;
  const date::time_zone* zone_ = nullptr;
  std::bitset<60> seconds_, minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_of_month_;  // 1..31
  std::bitset<13> months_;         // 1..12
  std::bitset<7> weekdays_;        // 0 = Sunday
  bool any_day_of_month_ = true, any_weekday_ = true;
};

// The id of the job a periodic entry's tick makes: NAME@2026-12-01T03:00:00Z
// (the tick in UTC), the same from any broker at any time.
std::string cron_tick_id(std::string_view name, int64_t tick_ms);

}  // namespace dueq
