#include "common/link_events.hpp"

#include <atomic>
#include <cstring>

#include <fmt/format.h>

namespace dueq {

namespace {
std::string unique_endpoint() {
  static std::atomic<int> next{0};
  return "inproc://dueq-link-events-" + std::to_string(next++);
}
constexpr int kWatched = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                         ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
}  // namespace

LinkEvents::LinkEvents(zmq::context_t& context, zmq::socket_t& socket, bool curve)
    : events_(context, zmq::socket_type::pair), curve_(curve) {
  const std::string endpoint = unique_endpoint();
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), kWatched) != 0) throw zmq::error_t();
  events_.set(zmq::sockopt::linger, 0);
  events_.connect(endpoint);
}

LinkEvents::Update LinkEvents::read(const std::string& endpoint) {
  Update update;
  // A reconnecting socket makes a few events a second at most: all are read.
  while (true) {
    zmq::message_t event;
    if (!events_.recv(event, zmq::recv_flags::dontwait)) break;
    zmq::message_t address;
    if (event.more()) (void)events_.recv(address, zmq::recv_flags::dontwait);
    if (event.size() < 6 || address.to_string_view() != endpoint) continue;
    uint16_t id = 0;
    uint32_t value = 0;
    std::memcpy(&id, event.data(), sizeof id);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
    switch (id) {
      case ZMQ_EVENT_CONNECTED:
        tcp_connected_ = true;
        break;
      case ZMQ_EVENT_CONNECT_RETRIED:
        tcp_refused_ = !tcp_connected_;
        update.lost = true;
        break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        up_ = true;
        update.up = true;
        closed_in_handshake_ = false;
        auth_status_ = 0;
        protocol_error_ = 0;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        auth_status_ = static_cast<int>(value);
        update.refused = true;
        update.lost = true;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        protocol_error_ = value;
        update.lost = true;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        update.lost = true;
        break;
      case ZMQ_EVENT_DISCONNECTED:
        if (!up_ && tcp_connected_) closed_in_handshake_ = true;
        up_ = false;
        update.lost = true;
        break;
      default:
        break;
    }
  }
  return update;
}

void LinkEvents::forget() {
  up_ = tcp_connected_ = tcp_refused_ = closed_in_handshake_ = false;
  auth_status_ = 0;
  protocol_error_ = 0;
}

LinkDiagnosis LinkEvents::diagnosis(const std::string& endpoint) const {
  if (up_) return {};
  if (auth_status_ == 500)
    return {LinkProblem::broker_full, fmt::format("the broker at {} turned this connection away (ZAP status 500): it is at its "
                       "open-file limit; try again later, or raise the broker's limit (LimitNOFILE)", endpoint)};
  if (auth_status_ != 0)
    return {LinkProblem::key_refused, fmt::format("the broker at {} refused this client's key (ZAP status {}): its public key is not on the "
                       "broker's allow-list, or the broker requires a key and none was given (--key, DUEQ_KEY)",
                       endpoint, auth_status_)};
  if (protocol_error_ == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    return {LinkProblem::curve_mismatch, fmt::format("the broker at {} and this client disagree on CURVE: one has keys and the other none "
                       "(give --broker-key and --key for a broker with CURVE, neither for one without)", endpoint)};
  // Without keys no broker key can be wrong: whatever listens there closed
  // the connection before ZeroMQ's greeting was done. That is a service
  // that is no broker, or a broker with CURVE whose mechanism-mismatch
  // report did not come first (the close can): both are said.
  if ((protocol_error_ != 0 || closed_in_handshake_) && !curve_)
    return {LinkProblem::not_a_broker, fmt::format("{} accepted the connection and closed it before the ZeroMQ handshake finished: "
                       "it is not a dueq broker (check the address and the port), or it and this client disagree on CURVE "
                       "(a broker with CURVE needs --broker-key and --key)", endpoint)};
  if (protocol_error_ != 0 || closed_in_handshake_)
    return {LinkProblem::handshake, fmt::format("the CURVE handshake with {} failed: check that --broker-key (DUEQ_BROKER_KEY) is this "
                       "broker's public key", endpoint)};
  if (tcp_refused_)
    return {LinkProblem::nothing_listens, fmt::format("nothing listens at {} (connection refused): is dueq-broker running there, and is the "
                       "address right?", endpoint)};
  if (!tcp_connected_)
    return {LinkProblem::no_answer, fmt::format("no answer from {}: its host does not accept the connection (check the address, and that "
                       "a firewall lets the port through)", endpoint)};
  return {LinkProblem::pending, fmt::format("connected to {}, but the handshake has not finished", endpoint)};
}

}  // namespace dueq
