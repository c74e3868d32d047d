#pragma once
// Who sent a frame and how to answer: every component replies through the
// Outbox, which owns nothing but the ROUTER socket's send side.
#include <zmq.hpp>

#include <string>

#include "common/protocol.hpp"

namespace dueq::broker {

struct Peer {
  std::string routing_id;
  bool req_envelope = false;  // REQ peers put an empty frame before the body
};

class Outbox {
 public:
  explicit Outbox(zmq::socket_t& router) : router_(router) {}

  // ROUTER drops what it cannot route (peer gone): every reply is either
  // retried by its sender or resent, and a dropped TASKS frame's leases run
  // out at the delivery deadline.
  template <typename T>
  void send(const Peer& peer, const T& frame) {
    const std::string body = proto::encode(frame);
    router_.send(zmq::buffer(peer.routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    if (peer.req_envelope) router_.send(zmq::const_buffer(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router_.send(zmq::buffer(body), zmq::send_flags::dontwait);
  }

 private:
  zmq::socket_t& router_;
};

}  // namespace dueq::broker
