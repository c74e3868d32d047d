#pragma once
#include <string>

#include "common/error.hpp"

namespace dueq {

// Sets up the default spdlog logger for a process ("broker", "worker", ...)
// at the given level name (trace, debug, info, warn, error).
Result<void> setup_logging(const std::string& process, const std::string& level);

}  // namespace dueq
