// Fuzz target: the Redis URL parser (common/redis_url.hpp), and the broker
// endpoint list clients take (common/broker_endpoints.hpp): an accepted list
// names 1..16 endpoints, each of a known scheme. Any text gives an
// address or an error, never a crash; neither the error nor describe() ever
// shows a password. The input gets a marker just before its last '@', where
// the password ends in every form the parser reads (redis://user:pw@,
// redis://pw@) and in mistyped ones ("redis:pw@host"): the marker must not
// come back.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/broker_endpoints.hpp"
#include "common/redis_url.hpp"

namespace {

constexpr std::string_view kMarker = "S3cr3tMarker";

void check(std::string_view url) {
  auto address = dueq::parse_redis_url(url);
  if (!address) {
    if (address.error().message.empty()) std::abort();
    if (address.error().message.find(kMarker) != std::string::npos) std::abort();
    return;
  }
  // A socket path is shown as it is: an '@' in it is part of the path.
  if (address->unix_path.empty() && address->describe().find(kMarker) != std::string::npos) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view url(reinterpret_cast<const char*>(data), size);
  if (auto endpoints = dueq::BrokerEndpoints::parse(url)) {
    for (size_t i = 0; i <= dueq::BrokerEndpoints::kMaxEndpoints; ++i) {
      const std::string& current = endpoints->current();
      if (!current.starts_with("tcp://") && !current.starts_with("ipc://") && !current.starts_with("inproc://")) std::abort();
      if (endpoints->next()) break;
      if (i == dueq::BrokerEndpoints::kMaxEndpoints) std::abort();  // more than 16
    }
  } else if (endpoints.error().message.empty()) {
    std::abort();
  }
  const auto at = url.rfind('@');
  if (at == std::string_view::npos || url.find(kMarker) != std::string_view::npos) {
    auto address = dueq::parse_redis_url(url);  // no password to look for
    if (!address && address.error().message.empty()) std::abort();
    return 0;
  }
  std::string marked(url.substr(0, at));
  marked += kMarker;
  marked += url.substr(at);
  check(marked);
  return 0;
}
