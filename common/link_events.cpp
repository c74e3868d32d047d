#include "common/link_events.hpp"

#include <atomic>
#include <cstring>

namespace dueq {

namespace {
std::string unique_endpoint() {
  static std::atomic<int> next{0};
  return "inproc://dueq-link-events-" + std::to_string(next++);
}
constexpr int kLinkDown = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                          ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
}  // namespace

LinkEvents::LinkEvents(zmq::context_t& context, zmq::socket_t& socket) : events_(context, zmq::socket_type::pair) {
  const std::string endpoint = unique_endpoint();
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), kLinkDown) != 0) throw zmq::error_t();
  events_.set(zmq::sockopt::linger, 0);
  events_.connect(endpoint);
}

bool LinkEvents::lost(const std::string& endpoint) {
  bool down = false;
  // A reconnecting socket makes a few events a second at most: all are read.
  while (true) {
    zmq::message_t event;
    if (!events_.recv(event, zmq::recv_flags::dontwait)) break;
    zmq::message_t address;
    if (event.more()) (void)events_.recv(address, zmq::recv_flags::dontwait);
    if (event.size() >= 2 && address.to_string_view() == endpoint) down = true;
  }
  return down;
}

}  // namespace dueq
