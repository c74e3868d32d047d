#include "common/endpoint.hpp"

namespace dueq {

std::string resolve_advertised_endpoint(const std::string& broker_endpoint, const std::string& advertised) {
  if (!advertised.starts_with("tcp://*:") || !broker_endpoint.starts_with("tcp://")) return advertised;
  const std::string hostport = broker_endpoint.substr(6);
  const auto colon = hostport.rfind(':');
  const std::string host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
  return "tcp://" + host + advertised.substr(7);
}

std::string task_bind_endpoint(const std::string& listen_endpoint, const std::string& queue) {
  if (listen_endpoint.starts_with("tcp://")) {
    const std::string hostport = listen_endpoint.substr(6);
    const auto colon = hostport.rfind(':');
    return "tcp://" + (colon == std::string::npos ? hostport : hostport.substr(0, colon)) + ":*";
  }
  return listen_endpoint + ".task." + queue;
}

}  // namespace dueq
