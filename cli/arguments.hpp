#pragma once
// The rules of `dueq`'s arguments that CLI11 cannot state, checked before
// any connection: each problem is a usage error (exit 2) as text.
#include <cstdint>
#include <expected>
#include <optional>
#include <string>

#include "cli/invocation.hpp"

namespace dueq::cli {

// The job `dueq enqueue` was given on its command line (nullopt with
// --from); a usage error as text.
std::expected<std::optional<JobSpec>, std::string> enqueued_job(const Invocation& v, bool& generated_id);

// The first broken rule, "" when all hold; fills in the arguments the
// broker is sent (times in ms, rates) as it reads them.
std::string arguments_problem(Invocation& v);

// A positive duration flag (at least `min_ms`); a usage error as text.
std::expected<int64_t, std::string> positive_duration(const char* flag, const std::string& text, int64_t min_ms = 1);

}  // namespace dueq::cli
