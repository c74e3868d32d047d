#pragma once
// A peer that speaks the wire protocol by hand (a DEALER socket and
// proto::encode/decode), as a hostile or broken client would.
#include <chrono>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "common/protocol.hpp"

namespace dueq::testing {

class RawPeer {
 public:
  RawPeer(const std::string& endpoint, const std::string& routing_id) : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::routing_id, routing_id);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  template <typename T>
  void send(const T& body) {
    send_raw(proto::encode(body));
  }
  // Bytes as they are: a frame this side's encoder would not check.
  void send_raw(const std::string& bytes) { socket_.send(zmq::buffer(bytes), zmq::send_flags::none); }
  // The next frame within `timeout`, if any.
  std::optional<proto::Frame> receive(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) != 1) return std::nullopt;
    zmq::message_t reply;
    if (!socket_.recv(reply)) return std::nullopt;
    auto frame = proto::decode(reply.to_string_view());
    return frame ? std::optional(std::move(*frame)) : std::nullopt;
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

}  // namespace dueq::testing
