#pragma once
#include <cstdint>
#include <string_view>

#include "common/error.hpp"

namespace dueq {

// The longest duration anything accepts (100 years): sums and multiples of
// durations and Unix milliseconds then stay far inside int64_t.
inline constexpr int64_t kMaxDurationMs = 36'500LL * 86'400'000;

// Parses "250ms", "30s", "5m", "2h", "30d" (or "0"), at most kMaxDurationMs.
// A number without a unit is refused: "30" is a mistake whichever unit was
// meant.
Result<int64_t> parse_duration_ms(std::string_view text);

// Parses an RFC 3339 timestamp ("2026-11-22T03:00:00Z", "...+01:00", optional
// fractional seconds) into Unix milliseconds.
Result<int64_t> parse_rfc3339_ms(std::string_view text);

}  // namespace dueq
