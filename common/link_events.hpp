#pragma once
// A client socket's connection events (zmq_socket_monitor): whether the
// link to the endpoint in use went down (the peer closed it, a connect was
// refused, the handshake failed), so that a client with several broker
// endpoints moves to the next at once instead of after a timeout; and, while
// the link is not up, why not, in words a user can act on: nothing listens
// there, the host does not answer, the broker refused this key or is at its
// open-file limit, or the CURVE handshake failed (a wrong broker key, or
// CURVE on one side only).
#include <zmq.hpp>

#include <cstdint>
#include <string>

namespace dueq {

// Why a link is not up.
enum class LinkProblem {
  none,            // it is up
  key_refused,     // the broker's ZAP refused this client's key
  broker_full,     // the broker turned the connection away at its open-file limit (ZAP 500)
  curve_mismatch,  // CURVE on one side only
  handshake,       // the CURVE handshake failed: a wrong broker key
  not_a_broker,    // without CURVE keys, the peer closed the connection in the handshake: no broker, or one with CURVE
  nothing_listens, // the connect was refused (or the name not resolved)
  no_answer,       // the connect is still pending
  pending,         // connected, the handshake not finished yet
};

struct LinkDiagnosis {
  LinkProblem problem = LinkProblem::none;
  std::string text;  // what to check, naming the endpoint
};

class LinkEvents {
 public:
  // `curve`: the socket uses CURVE keys (a failed handshake then points at them).
  LinkEvents(zmq::context_t& context, zmq::socket_t& socket, bool curve);

  struct Update {
    bool lost = false;     // the link to the endpoint went down
    bool up = false;       // a handshake succeeded: the broker took this client's key
    bool refused = false;  // the broker refused this client's key (its ZAP answer)
  };

  // The socket to poll for ZMQ_POLLIN.
  void* handle() { return events_.handle(); }
  // Reads the waiting events about `endpoint` (events about endpoints left
  // earlier are ignored).
  Update read(const std::string& endpoint);
  // The client moved to another endpoint: what was learned is forgotten.
  void forget();
  bool up() const { return up_; }
  // Why the link to `endpoint` is not up, from what was seen since the
  // connect began; empty while it is up.
  LinkDiagnosis diagnosis(const std::string& endpoint) const;

 private:
  zmq::socket_t events_;
  bool curve_ = false;
  bool up_ = false;
  bool tcp_connected_ = false;   // a TCP connection was made since the last forget()
  bool tcp_refused_ = false;     // a connect failed (refused, unreachable, not resolved)
  bool closed_in_handshake_ = false;  // connected, then closed before any handshake succeeded
  int auth_status_ = 0;          // the ZAP status of a refusal (400: key not allowed, 500: at the open-file limit)
  uint32_t protocol_error_ = 0;  // ZMQ_PROTOCOL_ERROR_* of a failed handshake
};

}  // namespace dueq
