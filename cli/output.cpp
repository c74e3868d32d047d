#include "cli/output.hpp"

#include <ctime>

#include <fmt/format.h>

namespace dueq::cli {

int report(const ClientError& error) {
  fmt::print(stderr, "dueq: {}: {}\n", error.code, error.message);
  if (error.code == "refused") return kExitRefused;
  if (error.code == "handshake") return kExitConfig;
  if (error.code == "bad_argument") return kExitUsage;
  if (error.code == "not_found") return kExitNotFound;
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

}  // namespace dueq::cli
