#pragma once
// A bound ROUTER standing in for the broker: it reads what a client or a
// worker sends and answers when a test tells it to.
#include <zmq.hpp>

#include <chrono>
#include <optional>
#include <string>

#include "common/protocol.hpp"
#include "tests/support/redis_server.hpp"  // free_port

namespace dueq::testing {

class FakeBroker {
 public:
  FakeBroker() : socket_(context_, zmq::socket_type::router), port_(free_port()) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind(endpoint());
  }
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

  struct Received {
    std::string routing_id;
    proto::Frame frame;
    size_t bytes = 0;  // of the frame as it came
  };
  std::optional<Received> receive(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) != 1) return std::nullopt;
    zmq::message_t routing_id, body;
    if (!socket_.recv(routing_id) || !socket_.recv(body)) return std::nullopt;
    auto frame = proto::decode(std::string_view(static_cast<const char*>(body.data()), body.size()));
    if (!frame) return std::nullopt;
    return Received{routing_id.to_string(), std::move(*frame), body.size()};
  }
  template <typename T>
  void reply(const std::string& routing_id, const T& frame) {
    socket_.send(zmq::buffer(routing_id), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(proto::encode(frame)));
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
  int port_;
};


}  // namespace dueq::testing
