#pragma once
#include <cstdint>
#include <string_view>

#include "common/error.hpp"

namespace dueq {

// Parses "250ms", "30s", "5m", "2h", "30d" or a bare number of milliseconds.
Result<int64_t> parse_duration_ms(std::string_view text);

// Parses an RFC 3339 timestamp ("2026-11-22T03:00:00Z", "...+01:00", optional
// fractional seconds) into Unix milliseconds.
Result<int64_t> parse_rfc3339_ms(std::string_view text);

}  // namespace dueq
