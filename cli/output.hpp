#pragma once
// What every dueq command prints on failure and how it exits.
#include <cstdint>
#include <expected>
#include <string>

#include "dueq/client.hpp"

namespace dueq::cli {

// Exit codes (sysexits.h where one fits): 0 ok, 1 error, 2 usage/bad input,
// 3 not found, 4 conflict (the job is running or finished, or changed since
// it was read), 75 try again later (no broker, Redis down, backlog full),
// 77 refused (this key, or its role, is not allowed that), 78 a CURVE
// set-up that cannot work (a wrong broker key, CURVE on one side only).
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotFound = 3;
constexpr int kExitConflict = 4;
constexpr int kExitTempFail = 75;
constexpr int kExitRefused = 77;
constexpr int kExitConfig = 78;

// Prints the error; the exit code says whether trying again may help.
int report(const ClientError& error);

// A time given as RFC 3339 or as Unix ms; what is wrong with it as text.
std::expected<int64_t, std::string> time_ms(const std::string& text);

// Unix ms as RFC 3339 UTC with milliseconds; "-" for none.
std::string format_time(int64_t ms);

}  // namespace dueq::cli
