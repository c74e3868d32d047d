#pragma once
// A TCP proxy on loopback between a broker and its Redis, for what the
// kernel here cannot do (no netem qdisc): every byte arrives a fixed delay
// after it was sent, each way, without changing the order or the pipelining
// of what flows; and the bytes a client sends can be held in the link and
// delivered later, after the client gave up on them and closed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/redis_server.hpp"

namespace dueq::testing {

class DelayProxy {
 public:
  DelayProxy(int upstream_port, std::chrono::microseconds delay) : upstream_port_(upstream_port), delay_(delay) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    for (int tries = 0;; ++tries) {
      port_ = free_port();
      sockaddr_in addr = loopback(port_);
      if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
      if (tries == 20) throw std::runtime_error("DelayProxy: no free port");
    }
    ::listen(listen_fd_, 64);
    thread_ = std::thread([this] { loop(); });
  }
  ~DelayProxy() {
    stop_ = true;
    thread_.join();
    for (auto& link : links_) {
      ::close(link.client);
      ::close(link.server);
    }
    ::close(listen_fd_);
  }
  DelayProxy(const DelayProxy&) = delete;
  DelayProxy& operator=(const DelayProxy&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // From now on the bytes clients send stay in the proxy (their replies
  // still flow) until release(); a client that closes meanwhile has them
  // delivered then, and its server side closed after them.
  void hold() { holding_ = true; }
  void release() { holding_ = false; }
  // Bytes from clients not passed on to the server yet (held, or not due).
  size_t held_bytes() const { return held_bytes_; }

 private:
  struct Chunk {
    std::chrono::steady_clock::time_point due;
    std::string bytes;
  };
  struct Direction {
    std::deque<Chunk> chunks;
    bool closed = false;  // the sender closed: close the receiver once every chunk is written
  };
  struct Link {
    int client = -1, server = -1;
    Direction up, down;  // up: client -> server
    bool done = false;
    // The client closed and its bytes are written: the server side closes
    // a little later, so that the server runs them before it sees the close.
    std::chrono::steady_clock::time_point close_at = std::chrono::steady_clock::time_point::max();
  };

  static sockaddr_in loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    return addr;
  }

  void accept_links() {
    while (true) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (client < 0) return;
      const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr = loopback(upstream_port_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(server);
        ::close(client);
        continue;
      }
      ::fcntl(server, F_SETFL, ::fcntl(server, F_GETFL) | O_NONBLOCK);
      links_.push_back(Link{client, server});
    }
  }

  // Reads what `from` has into `dir`; false once `from` closed.
  bool take_in(int from, Direction& dir, bool from_client) {
    char buffer[64 * 1024];
    while (true) {
      const ssize_t n = ::read(from, buffer, sizeof buffer);
      if (n > 0) {
        dir.chunks.push_back(Chunk{std::chrono::steady_clock::now() + delay_, std::string(buffer, static_cast<size_t>(n))});
        if (from_client) held_bytes_ += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) return false;
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
  }

  // Writes the chunks of `dir` that are due to `to`; false if `to` failed.
  bool pass_on(Direction& dir, int to, bool to_server) {
    const auto now = std::chrono::steady_clock::now();
    while (!dir.chunks.empty() && dir.chunks.front().due <= now) {
      std::string& bytes = dir.chunks.front().bytes;
      const ssize_t n = ::send(to, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      bytes.erase(0, static_cast<size_t>(n));
      if (to_server) held_bytes_ -= static_cast<size_t>(n);
      if (!bytes.empty()) return true;
      dir.chunks.pop_front();
    }
    return true;
  }

  void serve(Link& link, const std::vector<pollfd>& fds, size_t at) {
    const bool held = holding_;
    if (!link.up.closed && (fds[at].revents & (POLLIN | POLLHUP | POLLERR)) && !take_in(link.client, link.up, true))
      link.up.closed = true;
    if (!link.down.closed && (fds[at + 1].revents & (POLLIN | POLLHUP | POLLERR)) && !take_in(link.server, link.down, false))
      link.down.closed = true;
    if (!held && !pass_on(link.up, link.server, true)) link.done = true;
    if (!pass_on(link.down, link.client, false)) link.done = true;
    // A side that closed is passed on once its bytes are: the server sees
    // the client's close only after the held bytes.
    const auto now = std::chrono::steady_clock::now();
    if (link.up.closed && link.up.chunks.empty() && !held && link.close_at == std::chrono::steady_clock::time_point::max())
      link.close_at = now + std::chrono::milliseconds(200);
    if (now >= link.close_at) link.done = true;
    if (link.down.closed && link.down.chunks.empty()) link.done = true;
  }

  void loop() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (auto& link : links_) {
        fds.push_back({link.client, static_cast<short>(link.up.closed ? 0 : POLLIN), 0});
        fds.push_back({link.server, static_cast<short>(link.down.closed ? 0 : POLLIN), 0});
      }
      // Wakes when the next chunk falls due (or a closed link ends), and
      // every 50 ms to see stop_.
      auto wake = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
      for (const auto& link : links_) {
        if (!link.up.chunks.empty() && !holding_) wake = std::min(wake, link.up.chunks.front().due);
        if (!link.down.chunks.empty()) wake = std::min(wake, link.down.chunks.front().due);
        wake = std::min(wake, link.close_at);
      }
      const auto wait_ns = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(wake - std::chrono::steady_clock::now()).count());
      const timespec tick{wait_ns / 1'000'000'000, wait_ns % 1'000'000'000};
      ::ppoll(fds.data(), fds.size(), &tick, nullptr);
      if (fds[0].revents & POLLIN) accept_links();
      size_t at = 1;
      for (auto it = links_.begin(); it != links_.end(); at += 2) {
        if (at + 1 < fds.size()) serve(*it, fds, at);
        if (it->done) {
          for (const auto& chunk : it->up.chunks) held_bytes_ -= chunk.bytes.size();
          ::close(it->client);
          ::close(it->server);
          it = links_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  int upstream_port_;
  std::chrono::microseconds delay_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> holding_{false};
  std::atomic<size_t> held_bytes_{0};
  std::list<Link> links_;
  std::thread thread_;
};

}  // namespace dueq::testing
