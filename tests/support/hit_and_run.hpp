#pragma once
// A peer that says HELLO for `queue` under a fresh routing id
// ("hit-and-run-N"), takes what TASKS frames come within 5 ms (3 at most)
// and vanishes without a word: what a stream of crashing or hostile workers
// looks like to the broker. Returns the TASKS frames it took.
#include <fmt/format.h>
#include <zmq.hpp>

#include <chrono>
#include <string>
#include <variant>

#include "common/protocol.hpp"

namespace dueq::testing {

inline int hit_and_run(zmq::context_t& context, const std::string& endpoint, const std::string& queue, int n) {
  const std::string id = fmt::format("hit-and-run-{}", n);
  zmq::socket_t peer(context, zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.set(zmq::sockopt::routing_id, id);
  peer.connect(endpoint);
  const std::string hello = proto::encode(proto::Hello{id, {queue}, 16, {}, "h", 1});
  peer.send(zmq::buffer(hello), zmq::send_flags::none);
  zmq::pollitem_t item{peer.handle(), 0, ZMQ_POLLIN, 0};
  int taken = 0;
  for (int frames = 0; frames < 3 && zmq::poll(&item, 1, std::chrono::milliseconds(5)) == 1; ++frames) {
    zmq::message_t message;
    if (!peer.recv(message)) break;
    auto frame = proto::decode(message.to_string_view());
    if (frame && std::holds_alternative<proto::Tasks>(*frame)) ++taken;
  }
  return taken;
}

}  // namespace dueq::testing
