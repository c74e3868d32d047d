#pragma once
// The ROUTER socket's connections, from its monitor events
// (zmq_socket_monitor): how many are open (the bound on how long a frame can
// wait behind other peers' frames, see Inbound), and those the broker could
// not accept. At the file-descriptor limit libzmq fails each accept()
// quietly and keeps the peer waiting; the refusals are logged, with the
// limit, so an operator sees them (rate-limited), and reported to the
// ConnectionGate, which ends them.
#include <zmq.hpp>

#include <cstdint>
#include <string>

#include "common/logging.hpp"

namespace dueq::broker {

// The process's open-file limit (soft), 0 when unknown.
uint64_t open_files_limit();

class ConnectionMonitor {
 public:
  // Starts monitoring `socket` (call before it binds or after; events of
  // later accepts are seen).
  ConnectionMonitor(zmq::context_t& context, zmq::socket_t& socket);

  // The socket to poll for ZMQ_POLLIN.
  void* handle() { return events_.handle(); }
  // Reads the waiting events (at most a bounded number per call) and logs
  // refused connections; `now_ms` is a steady time. Returns how many accepts
  // failed at the open-file limit (see ConnectionGate).
  uint64_t drain(int64_t now_ms);

  uint64_t refused() const { return refused_; }
  // Connections accepted and not yet closed (tcp and ipc; inproc peers
  // make no events).
  uint64_t connections() const { return connections_; }

 private:
  zmq::socket_t events_;
  uint64_t connections_ = 0;
  uint64_t refused_ = 0;
  uint64_t refused_unlogged_ = 0;
  LogLimiter refusal_log_{10'000, 1, 1};
};

}  // namespace dueq::broker
