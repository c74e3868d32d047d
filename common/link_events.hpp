#pragma once
// A client socket's connection events (zmq_socket_monitor): whether the
// link to the endpoint in use went down (the peer closed it, a connect was
// refused, the handshake failed). A client with several broker endpoints
// moves to the next at once instead of after a timeout.
#include <zmq.hpp>

#include <string>

namespace dueq {

class LinkEvents {
 public:
  LinkEvents(zmq::context_t& context, zmq::socket_t& socket);

  // The socket to poll for ZMQ_POLLIN.
  void* handle() { return events_.handle(); }
  // Reads the waiting events; true when one says the link to `endpoint`
  // is down (events about endpoints left earlier are ignored).
  bool lost(const std::string& endpoint);

 private:
  zmq::socket_t events_;
};

}  // namespace dueq
