#include "common/cron.hpp"

#include <date/tz.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <vector>

namespace dueq {

namespace {

using namespace std::chrono;

struct Field {
  const char* name;
  unsigned min, max;
  const char* const* names;  // names[i] is value min + i (nullptr: none)
};

constexpr const char* kMonthNames[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC", nullptr};
constexpr const char* kDayNames[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", nullptr};
constexpr Field kFields[] = {
    {"second", 0, 59, nullptr}, {"minute", 0, 59, nullptr},        {"hour", 0, 23, nullptr},
    {"day of month", 1, 31, nullptr}, {"month", 1, 12, kMonthNames}, {"day of week", 0, 7, kDayNames},
};

std::unexpected<Error> bad(std::string_view expression, const std::string& why) {
  return fail(Errc::bad_argument, fmt::format("cron expression '{}': {}", expression, why));
}

Result<unsigned> parse_value(std::string_view text, const Field& f, std::string_view expression) {
  if (f.names != nullptr && text.size() == 3) {
    for (unsigned i = 0; f.names[i] != nullptr; ++i) {
      bool same = true;
      for (size_t k = 0; k < 3; ++k)
        same = same && std::toupper(static_cast<unsigned char>(text[k])) == f.names[i][k];
      if (same) return f.min + i;
    }
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return bad(expression, fmt::format("{}: '{}' is not a number{}", f.name, text, f.names ? " or a name" : ""));
  if (value < f.min || value > f.max)
    return bad(expression, fmt::format("{}: {} is out of range {}..{}", f.name, value, f.min, f.max));
  return value;
}

// One field: sets the bits of the values it names; `star` says whether it
// was `*` (or `?`) with no step, i.e. unrestricted.
Result<void> parse_field(std::string_view text, const Field& f, std::string_view expression, std::vector<bool>& bits,
                         bool& star) {
  star = text == "*" || text == "?";
  size_t items = 0;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    if (++items > 64) return bad(expression, fmt::format("{}: more than 64 list items", f.name));
    if (item.empty()) return bad(expression, fmt::format("{}: an empty list item", f.name));
    std::string_view range = item;
    unsigned step = 1;
    if (const size_t slash = item.find('/'); slash != std::string_view::npos) {
      range = item.substr(0, slash);
      const std::string_view step_text = item.substr(slash + 1);
      const auto [end, ec] = std::from_chars(step_text.data(), step_text.data() + step_text.size(), step);
      if (step_text.empty() || ec != std::errc() || end != step_text.data() + step_text.size() || step == 0 ||
          step > f.max - f.min + 1)
        return bad(expression, fmt::format("{}: step '{}' must be 1..{}", f.name, step_text, f.max - f.min + 1));
    }
    unsigned lo = f.min, hi = f.max;
    if (range == "*" || range == "?") {
      if (range == "?" && f.min != 1 && f.max != 7) return bad(expression, fmt::format("{}: '?' is only for the day fields", f.name));
    } else if (const size_t dash = range.find('-'); dash != std::string_view::npos) {
      auto a = parse_value(range.substr(0, dash), f, expression);
      if (!a) return std::unexpected(a.error());
      auto b = parse_value(range.substr(dash + 1), f, expression);
      if (!b) return std::unexpected(b.error());
      if (*a > *b) return bad(expression, fmt::format("{}: range {} runs backwards", f.name, range));
      lo = *a;
      hi = *b;
    } else {
      auto a = parse_value(range, f, expression);
      if (!a) return std::unexpected(a.error());
      lo = *a;
      hi = item.find('/') == std::string_view::npos ? *a : f.max;  // "a/n": from a to the end
    }
    for (unsigned v = lo; v <= hi; v += step) bits[v] = true;
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return {};
}

std::string_view expand_macro(std::string_view expression) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kMacros{{
      {"@yearly", "0 0 0 1 1 *"}, {"@annually", "0 0 0 1 1 *"}, {"@monthly", "0 0 0 1 * *"},
      {"@weekly", "0 0 0 * * 0"}, {"@daily", "0 0 0 * * *"},    {"@midnight", "0 0 0 * * *"},
      {"@hourly", "0 0 * * * *"},
  }};
  for (const auto& [macro, fields] : kMacros)
    if (expression == macro) return fields;
  return expression;
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

Result<CronSchedule> CronSchedule::parse(std::string_view expression, std::string_view time_zone) {
  if (expression.size() > kMaxExpressionBytes)
    return fail(Errc::bad_argument, fmt::format("cron expression longer than {} bytes", kMaxExpressionBytes));
  CronSchedule s;
  s.expression_ = std::string(expression);
  const std::string_view fields_text = expand_macro(expression);
  if (!fields_text.empty() && fields_text.front() == '@') return bad(expression, "unknown macro (@yearly, @monthly, @weekly, @daily, @hourly)");
  std::vector<std::string_view> parts;
  for (size_t at = 0; at < fields_text.size();) {
    while (at < fields_text.size() && (fields_text[at] == ' ' || fields_text[at] == '\t')) ++at;
    if (at == fields_text.size()) break;
    size_t end = at;
    while (end < fields_text.size() && fields_text[end] != ' ' && fields_text[end] != '\t') ++end;
    parts.push_back(fields_text.substr(at, end - at));
    at = end;
  }
  if (parts.size() == 5) parts.insert(parts.begin(), "0");
  if (parts.size() != 6)
    return bad(expression, fmt::format("expected 6 fields (second minute hour day-of-month month day-of-week) or 5, "
                                       "found {}", parts.size()));
  bool star = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<bool> bits(kFields[i].max + 1, false);
    if (auto ok = parse_field(parts[i], kFields[i], expression, bits, star); !ok) return std::unexpected(ok.error());
    for (unsigned v = kFields[i].min; v <= kFields[i].max; ++v) {
      if (!bits[v]) continue;
      switch (i) {
        case 0: s.seconds_.set(v); break;
        case 1: s.minutes_.set(v); break;
        case 2: s.hours_.set(v); break;
        case 3: s.days_of_month_.set(v); break;
        case 4: s.months_.set(v); break;
        default: s.weekdays_.set(v % 7); break;
      }
    }
    if (i == 3) s.any_day_of_month_ = star;
    if (i == 5) s.any_weekday_ = star;
  }
  s.time_zone_name_ = std::string(time_zone);
  if (time_zone.empty() || time_zone.size() > 64) return fail(Errc::bad_argument, "time zone: expected a tz database name such as Europe/Berlin");
  try {
    s.zone_ = date::locate_zone(time_zone);
  } catch (const std::exception&) {
    return fail(Errc::bad_argument, fmt::format("unknown time zone '{}' (a tz database name such as Europe/Berlin or UTC)", time_zone));
  }
  if (!s.next_after(0)) return bad(expression, "it never matches (no such day in any month)");
  return s;
}

bool CronSchedule::day_matches(unsigned day_of_month, unsigned weekday) const {
  const bool dom = days_of_month_.test(day_of_month), dow = weekdays_.test(weekday);
  if (any_day_of_month_) return dow;
  if (any_weekday_) return dom;
  return dom || dow;
}

std::optional<int64_t> CronSchedule::next_local_match(int64_t local_s, int64_t limit_local_s) const {
  // Each step moves to the start of the next unit that can match, so a
  // search takes at most a few hundred steps even for a rare match.
  while (local_s <= limit_local_s) {
    const int64_t day_number = floor_div(local_s, 86'400);
    const date::local_days day{date::days{day_number}};
    const date::year_month_day ymd{day};
    const int64_t second_of_day = local_s - day_number * 86'400;
    const auto month = static_cast<unsigned>(ymd.month());
    if (!months_.test(month)) {
      const date::year_month next = date::year_month{ymd.year(), ymd.month()} + date::months{1};
      local_s = int64_t{date::local_days{next / 1}.time_since_epoch().count()} * 86'400;
      continue;
    }
    if (!day_matches(static_cast<unsigned>(ymd.day()), date::weekday{day}.c_encoding())) {
      local_s = (day_number + 1) * 86'400;
      continue;
    }
    const auto hour = static_cast<size_t>(second_of_day / 3600);
    if (!hours_.test(hour)) {
      local_s = day_number * 86'400 + static_cast<int64_t>(hour + 1) * 3600;
      continue;
    }
    const auto minute = static_cast<size_t>(second_of_day % 3600 / 60);
    if (!minutes_.test(minute)) {
      local_s = day_number * 86'400 + static_cast<int64_t>(hour) * 3600 + static_cast<int64_t>(minute + 1) * 60;
      continue;
    }
    if (!seconds_.test(static_cast<size_t>(second_of_day % 60))) {
      ++local_s;
      continue;
    }
    return local_s;
  }
  return std::nullopt;
}

std::optional<int64_t> CronSchedule::next_after(int64_t after_ms) const {
  const date::sys_seconds after{seconds{floor_div(after_ms, 1000)}};
  const int64_t local_after = zone_->to_local(after).time_since_epoch().count();
  const int64_t limit = local_after + int64_t{kHorizonYears} * 366 * 86'400;
  int64_t candidate = local_after + 1;
  // A candidate maps to an instant at or before `after` only in the hour a
  // clock goes back: at most one hour's matches are passed over.
  for (int steps = 0; steps < 4'000; ++steps) {
    const auto local = next_local_match(candidate, limit);
    if (!local) return std::nullopt;
    const date::local_seconds at{seconds{*local}};
    const date::local_info info = zone_->get_info(at);
    date::sys_seconds instant;
    if (info.result == date::local_info::nonexistent) instant = info.first.end;  // the end of the gap
    else instant = date::sys_seconds{at.time_since_epoch()} - info.first.offset;  // the first occurrence
    if (instant > after) return instant.time_since_epoch().count() * 1000;
    candidate = *local + 1;
  }
  return std::nullopt;
}

std::string cron_tick_id(std::string_view name, int64_t tick_ms) {
  const date::sys_seconds at{seconds{floor_div(tick_ms, 1000)}};
  return fmt::format("{}@{}", name, date::format("%FT%TZ", at));
}

}  // namespace dueq
