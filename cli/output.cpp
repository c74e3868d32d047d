#include "cli/output.hpp"

#include <algorithm>
#include <ctime>

#include <fmt/format.h>

#include "common/duration.hpp"

namespace dueq::cli {

int report(const ClientError& error) {
  fmt::print(stderr, "dueq: {}: {}\n", error.code, error.message);
  if (error.code == "refused") return kExitRefused;
  if (error.code == "handshake") return kExitConfig;
  if (error.code == "bad_argument") return kExitUsage;
  if (error.code == "not_found") return kExitNotFound;
  if (error.code == "conflict") return kExitConflict;
  if (error.retry_after_ms > 0) fmt::print(stderr, "dueq: retry after {} ms\n", error.retry_after_ms);
  return error.code == "unavailable" || error.code == "overloaded" || error.code == "timeout" ? kExitTempFail : kExitError;
}

std::string format_time(int64_t ms) {
  if (ms <= 0) return "-";
  const time_t secs = ms / 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", buffer, ms % 1000);
}

std::expected<int64_t, std::string> time_ms(const std::string& text) {
  if (!text.empty() && std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) && text.size() <= 15)
    return std::stoll(text);
  auto ms = parse_rfc3339_ms(text);
  if (!ms) return std::unexpected("expected an RFC 3339 time (2026-11-28T04:00:00Z) or Unix ms: " + ms.error().message);
  return *ms;
}

}  // namespace dueq::cli
