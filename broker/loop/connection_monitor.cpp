#include "broker/loop/connection_monitor.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <atomic>
#include <cstring>

#include "common/error.hpp"

namespace dueq::broker {

namespace {
// At the limit libzmq retries the accept on every wake of its I/O thread, so
// events can come in floods: the loop reads this many per turn at most.
constexpr int kEventsPerTurn = 1'000;

std::string unique_endpoint() {
  static std::atomic<int> next{0};
  return "inproc://dueq-connection-monitor-" + std::to_string(next++);
}
}  // namespace

uint64_t open_files_limit() {
  rlimit limit{};
  return ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 0;
}

ConnectionMonitor::ConnectionMonitor(zmq::context_t& context, zmq::socket_t& socket)
    : events_(context, zmq::socket_type::pair) {
  const std::string endpoint = unique_endpoint();
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPT_FAILED) != 0)
    throw zmq::error_t();
  events_.set(zmq::sockopt::linger, 0);
  // The events wait here for the loop: 100,000 of some 100 bytes each, so
  // that a burst of connections loses none of them (a lost ACCEPTED would
  // count a peer too few), and a flood of refusals cannot grow without end.
  events_.set(zmq::sockopt::rcvhwm, 100'000);
  events_.connect(endpoint);
}

uint64_t ConnectionMonitor::drain(int64_t now_ms) {
  uint64_t refused_now = 0, at_fd_limit = 0;
  int last_errno = 0;
  for (int i = 0; i < kEventsPerTurn; ++i) {
    zmq::message_t event;
    if (!events_.recv(event, zmq::recv_flags::dontwait)) break;
    zmq::message_t endpoint;
    if (event.more()) (void)events_.recv(endpoint, zmq::recv_flags::dontwait);
    if (event.size() < 6) continue;
    uint16_t id = 0;
    int32_t value = 0;
    std::memcpy(&id, event.data(), sizeof id);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
    if (id == ZMQ_EVENT_ACCEPTED) ++connections_;
    if (id == ZMQ_EVENT_DISCONNECTED && connections_ > 0) --connections_;
    if (id != ZMQ_EVENT_ACCEPT_FAILED) continue;
    ++refused_now;
    if (value == EMFILE || value == ENFILE) ++at_fd_limit;
    last_errno = value;
  }
  if (refused_now == 0) return 0;
  refused_ += refused_now;
  refused_unlogged_ += refused_now;
  if (refusal_log_.admit("", now_ms)) {
    // One formatting pass, in spdlog's own buffer: at the open-file limit a
    // sanitized build's first use of another fmt buffer type fails UBSan's
    // vptr check (the check needs a pipe) and stops the broker.
    if (last_errno == EMFILE || last_errno == ENFILE)
      spdlog::error("could not accept {} connection attempts ({}): the broker's open-file limit is {} (raise "
                    "LimitNOFILE / ulimit -n); {} refused since start",
                    refused_unlogged_, errno_text(last_errno), open_files_limit(), refused_);
    else
      spdlog::error("could not accept {} connection attempts ({}); {} refused since start", refused_unlogged_,
                    errno_text(last_errno), refused_);
    refused_unlogged_ = 0;
  }
  return at_fd_limit;
}

}  // namespace dueq::broker
