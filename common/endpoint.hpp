#pragma once
#include <string>

namespace dueq {

// The broker advertises task endpoints as "tcp://*:PORT" because it binds on
// every interface; a worker reaches them on the host it used for the broker.
std::string resolve_advertised_endpoint(const std::string& broker_endpoint, const std::string& advertised);

// The endpoint the broker binds a queue's task socket to, derived from its
// --listen endpoint: tcp → same interface, port chosen by the OS; ipc → a
// sibling socket file.
std::string task_bind_endpoint(const std::string& listen_endpoint, const std::string& queue);

}  // namespace dueq
