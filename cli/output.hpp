#pragma once
// What every dueq command prints on failure and how it exits.
#include <cstdint>
#include <string>

#include "dueq/client.hpp"

namespace dueq::cli {

// Exit codes: 0 ok, 1 error, 2 usage/bad input, 3 not found, 75 try again later.
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotFound = 3;
constexpr int kExitTempFail = 75;

// Prints the error; the exit code says whether trying again may help.
int report(const ClientError& error);

// Unix ms as RFC 3339 UTC with milliseconds; "-" for none.
std::string format_time(int64_t ms);

}  // namespace dueq::cli
