#include "common/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace dueq {

Result<void> setup_logging(const std::string& process, const std::string& level) {
  const auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off")
    return fail(Errc::bad_argument, "unknown log level '" + level + "': use trace, debug, info, warn, error or off");
  auto logger = spdlog::stderr_color_mt(process);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %n[%P] %^%l%$ %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return {};
}

}  // namespace dueq
