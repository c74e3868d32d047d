// Fuzz target: the broker's TOML config file (broker/config/config.hpp). Any text
// gives a configuration or an error naming the key or line, never a crash.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "broker/config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dueq::broker::BrokerConfig config;
  auto loaded = dueq::broker::load_config_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.toml", config);
  if (!loaded) {
    if (loaded.error().message.empty()) std::abort();
    return 0;
  }
  (void)dueq::broker::validate_config(config);
  return 0;
}
