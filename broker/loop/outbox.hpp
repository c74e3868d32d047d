#pragma once
// Who sent a frame and how to answer: every component replies through the
// Outbox, which owns nothing but the ROUTER socket's send side.
#include <zmq.hpp>

#include <cerrno>
#include <string>

#include "common/protocol.hpp"

namespace dueq::broker {

struct Peer {
  std::string routing_id;
  bool req_envelope = false;  // REQ peers put an empty frame before the body
  std::string key_name;       // with CURVE on: the allow-list name of its key
  uint32_t key_capacity = 0;  // with CURVE on: the most jobs all of its key's workers hold together (0 = no limit)
};

class Outbox {
 public:
  explicit Outbox(zmq::socket_t& router) : router_(router) {}

  // True when the frame was queued for the peer. The socket is
  // ROUTER_MANDATORY, so a peer that is not connected (EHOSTUNREACH) or
  // reads too slowly to take more (EAGAIN at the send high-water mark) is
  // reported rather than silently skipped: the dispatcher hands such a TASKS
  // frame's jobs back without using an attempt. Other replies are retried by
  // their senders or resent, so they may be dropped.
  template <typename T>
  bool send(const Peer& peer, const T& frame) {
    const std::string body = proto::encode(frame);
    try {
      // The first part decides: once it is queued, the rest of the message is.
      if (!router_.send(zmq::buffer(peer.routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
      if (peer.req_envelope) router_.send(zmq::const_buffer(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      router_.send(zmq::buffer(body), zmq::send_flags::dontwait);
      return true;
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH) return false;
      throw;
    }
  }

 private:
  zmq::socket_t& router_;
};

}  // namespace dueq::broker
