#include "common/duration.hpp"

#include <charconv>
#include <ctime>
#include <string>

namespace dueq {

const char* errc_name(Errc code) {
  switch (code) {
    case Errc::bad_frame: return "bad_frame";
    case Errc::bad_argument: return "bad_argument";
    case Errc::unavailable: return "unavailable";
    case Errc::overloaded: return "overloaded";
    case Errc::timeout: return "timeout";
    case Errc::not_found: return "not_found";
    case Errc::refused: return "refused";
    case Errc::internal: return "internal";
    case Errc::not_leader: return "not_leader";
    case Errc::fenced: return "fenced";
    case Errc::conflict: return "conflict";
    case Errc::not_master: return "unavailable";  // the same to a client: try again later
  }
  return "unknown";
}

Result<int64_t> parse_duration_ms(std::string_view text) {
  const std::string original(text);
  if (text.empty()) return fail(Errc::bad_argument, "empty duration");
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || value < 0)
    return fail(Errc::bad_argument, "bad duration '" + original + "': expected e.g. 500ms, 30s, 5m, 2h, 1d");
  std::string_view unit(end, text.data() + text.size() - end);
  int64_t scale = 0;
  // A bare number is refused (is "30" seconds or milliseconds?), but for 0.
  if (unit.empty() && value != 0)
    return fail(Errc::bad_argument, "duration '" + original + "' has no unit: use ms, s, m, h or d (e.g. " + original + "s)");
  if (unit.empty() || unit == "ms") scale = 1;
  else if (unit == "s") scale = 1000;
  else if (unit == "m") scale = 60'000;
  else if (unit == "h") scale = 3'600'000;
  else if (unit == "d") scale = 86'400'000;
  else
    return fail(Errc::bad_argument, "bad duration unit in '" + original + "': use ms, s, m, h or d");
  if (value > kMaxDurationMs / scale) return fail(Errc::bad_argument, "duration too large: " + original + " (at most 36500d)");
  return value * scale;
}

Result<int64_t> parse_rfc3339_ms(std::string_view text) {
  const std::string s(text);
  auto bad = [&] { return fail(Errc::bad_argument, "bad RFC 3339 time '" + s + "': expected e.g. 2026-11-22T03:00:00Z"); };
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6 || consumed != 19)
    return bad();
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
      tm.tm_sec > 60)
    return bad();
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  size_t pos = 19;
  int64_t millis = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      if (digits < 3) millis = millis * 10 + (s[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return bad();
    for (int d = digits; d < 3; ++d) millis *= 10;
  }
  int64_t offset_s = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos + 6 == s.size() && (s[pos] == '+' || s[pos] == '-') && s[pos + 3] == ':') {
    int oh = 0, om = 0;
    if (std::sscanf(s.c_str() + pos + 1, "%2d:%2d", &oh, &om) != 2 || oh > 23 || om > 59) return bad();
    offset_s = (int64_t{oh} * 3600 + int64_t{om} * 60) * (s[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != s.size()) return bad();
  const time_t secs = timegm(&tm);
  return (static_cast<int64_t>(secs) - offset_s) * 1000 + millis;
}

}  // namespace dueq
