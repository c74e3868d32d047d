#pragma once
// The HTTP server's front door. cpp-httplib gives each connection one of its
// few threads from the moment it is accepted, and its timeouts are per read:
// a client sending a byte every few seconds held a thread for as long as it
// liked, and four such left /healthz unanswered. The front reads each
// request whole on one thread of its own (epoll), under a deadline for the
// whole request and a byte limit, and only then hands it to the server (on
// a loopback port of its own) and carries the answer back. A slow client
// costs a descriptor and a few bytes, never a server thread.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace dueq::broker {

// How long the request that `in` begins with is, head and body: 0 while its
// head is not complete; a status (400, 411, 413, 431) and its reason when
// it is refused: a head past kMaxHeadBytes, a chunked body, a Content-Length
// that is not a number or is past `max_body_bytes`.
struct RequestSize {
  size_t bytes = 0;
  int status = 0;
  std::string reason;
};
RequestSize http_request_size(std::string_view in, size_t max_body_bytes);

class HttpFront {
 public:
  // From the connection's accept to the last byte of its request.
  static constexpr int64_t kRequestDeadlineMs = 5'000;
  // From the request handed on to the last byte of the answer.
  static constexpr int64_t kAnswerDeadlineMs = 30'000;
  static constexpr size_t kMaxHeadBytes = size_t{16} * 1024;
  // Connections at once; past it the one that has waited longest for its
  // request to finish is closed to make room (none waiting: the new one is).
  static constexpr size_t kMaxConnections = 2'048;
  // For the front's own answers (408, 413, ...): written, and the client's
  // further bytes dropped, within this long.
  static constexpr int64_t kLingerMs = 2'000;
  // Answer bytes read ahead of a client that reads slowly.
  static constexpr size_t kMaxBufferedAnswer = size_t{256} * 1024;

  HttpFront() = default;
  ~HttpFront() { stop(); }
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Listens on host:port (port 0: any free one) and passes whole requests
  // of at most kMaxHeadBytes + `max_body_bytes` to 127.0.0.1:`backend_port`;
  // the port it listens on.
  Result<int> start(const std::string& host, int port, int backend_port, size_t max_body_bytes);
  void stop();

 private:
  // lingering: its own answer written and its side shut; what the client
  // still sends is read and dropped until it closes (closing with unread
  // bytes would reset the connection, and the client could lose the answer).
  enum class Phase { reading, forwarding, answering_self, lingering };
  struct Conn {
    UniqueFd client;
    UniqueFd backend;
    Phase phase = Phase::reading;
    int64_t deadline_ms = 0;  // steady clock
    int64_t accepted_ms = 0;
    std::string in;            // the request as read
    size_t in_sent = 0;        // of it, written to the backend
    std::string out;           // answer bytes not yet written to the client
    bool backend_done = false;  // the backend closed its side
  };
  using ConnPtr = std::shared_ptr<Conn>;

  void loop();
  void accept_all(int64_t now);
  void on_event(const ConnPtr& c, int fd, uint32_t events, int64_t now);
  void read_request(const ConnPtr& c, int64_t now);
  void forward(const ConnPtr& c);
  void answer_self(const ConnPtr& c, int status, const std::string& reason);
  void drop_input(const ConnPtr& c);
  void watch(const ConnPtr& c);
  void close(const ConnPtr& c);
  void expire(int64_t now);
  UniqueFd listen_fd_;
  UniqueFd epoll_fd_;
  UniqueFd stop_fd_;  // an eventfd: written by stop()
  int backend_port_ = 0;
  size_t max_body_bytes_ = 0;
  std::map<int, ConnPtr> by_fd_;  // client and backend descriptors alike
  std::map<Conn*, ConnPtr> conns_;
  std::thread thread_;
};

}  // namespace dueq::broker
