#pragma once
// A TCP proxy for what the kernel here cannot do (no netem qdisc). Every
// chunk of bytes arrives some time after it was sent, each way: a fixed
// delay, plus up to `jitter`, plus now and then a stall as long as a TCP
// retransmission ("loss": to a TCP peer a lost segment is a late one).
// Within a connection the order stays; connections overtake one another.
// The bytes a client sends can be held in the link and delivered later,
// after the client gave up on them and closed.
//
// It stands on loopback in front of one server (LinkProxy(port, delay)), or
// inside a node's network namespace (Placement): an iptables REDIRECT there
// hands it the node's outgoing connections to some ports, and it passes each
// on to where it was going (SO_ORIGINAL_DST) from the node's own address,
// marked so that the rule lets it by. Partitions (iptables rules on the
// node's address) then cut the onward leg as they cut the node.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/redis_server.hpp"

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80  // linux/netfilter_ipv4.h, which clashes with netinet/in.h
#endif

namespace dueq::testing {

class LinkProxy {
 public:
  // Where a proxy in a node's namespace listens, and the mark its onward
  // connections carry (the REDIRECT rule skips packets with it).
  struct Placement {
    std::string netns_path;  // /var/run/netns/NAME
    int listen_port = 0;
    uint32_t mark = 0;
  };

  LinkProxy(int upstream_port, std::chrono::microseconds delay) : upstream_port_(upstream_port) {
    set_link(delay, std::chrono::microseconds(0), 0);
    start();
  }
  explicit LinkProxy(Placement placement) : placement_(std::move(placement)) { start(); }
  ~LinkProxy() {
    stop_ = true;
    thread_.join();
    for (auto& link : links_) {
      ::close(link.client);
      ::close(link.server);
    }
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }
  LinkProxy(const LinkProxy&) = delete;
  LinkProxy& operator=(const LinkProxy&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // Each chunk from now on: `delay` plus up to `jitter`, and one in
  // 1000 / `loss_permille` stalls 200 ms to 1 s more.
  void set_link(std::chrono::microseconds delay, std::chrono::microseconds jitter, int loss_permille) {
    delay_us_ = delay.count();
    jitter_us_ = jitter.count();
    loss_permille_ = loss_permille;
  }

  // From now on the bytes clients send stay in the proxy (their replies
  // still flow) until release(); a client that closes meanwhile has them
  // delivered then, and its server side closed after them.
  void hold() { holding_ = true; }
  // As hold(), from the first chunk a client sends that carries `marker`
  // (that chunk included): the write of one round, caught as it goes out.
  // Bytes before it pass as usual.
  void hold_from(std::string marker) {
    const std::lock_guard lock(marker_mutex_);
    marker_ = std::move(marker);
  }
  void release() {
    hold_from("");
    holding_ = false;
  }
  // New connections to `from` (an IPv4 address) go on to `to` instead, as
  // when a virtual address or a DNS name moves to another host; those open
  // stay where they are. `to` equal to `from` undoes it.
  void repoint(const std::string& from, const std::string& to) {
    in_addr a{}, b{};
    if (::inet_pton(AF_INET, from.c_str(), &a) != 1 || ::inet_pton(AF_INET, to.c_str(), &b) != 1)
      throw std::invalid_argument("LinkProxy::repoint: not IPv4 addresses: " + from + ", " + to);
    const std::lock_guard lock(repointed_mutex_);
    if (a.s_addr == b.s_addr) repointed_.erase(a.s_addr);
    else repointed_[a.s_addr] = b.s_addr;
  }

  // Bytes from clients not passed on to the server yet (held, or not due).
  size_t held_bytes() const { return held_bytes_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Chunk {
    Clock::time_point due;
    std::string bytes;
  };
  struct Direction {
    std::deque<Chunk> chunks;
    Clock::time_point last_due{};  // no chunk overtakes the one before it
    bool closed = false;  // the sender closed: close the receiver once every chunk is written
  };
  struct Link {
    int client = -1, server = -1;
    bool connecting = true;  // the onward connect has not completed yet
    Direction up, down;      // up: client -> server
    bool done = false;
    // The client closed and its bytes are written: the server side closes
    // a little later, so that the server runs them before it sees the close.
    Clock::time_point close_at = Clock::time_point::max();
  };

  static sockaddr_in loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    return addr;
  }

  // The loop's thread enters the namespace (sockets stay in the one they
  // were made in) and listens; the constructor waits for either outcome.
  void start() {
    std::promise<std::string> ready;
    auto outcome = ready.get_future();
    // The promise lives in the thread: set_value may still run after get() returns.
    thread_ = std::thread([this, ready = std::move(ready)]() mutable {
      std::string why = listen_here();
      const bool listening = why.empty();
      ready.set_value(std::move(why));
      if (listening) loop();
    });
    const std::string why = outcome.get();
    if (!why.empty()) {
      thread_.join();
      throw std::runtime_error("LinkProxy: " + why);
    }
  }

  std::string listen_here() {
    if (!placement_.netns_path.empty()) {
      const int ns = ::open(placement_.netns_path.c_str(), O_RDONLY | O_CLOEXEC);
      const bool entered = ns >= 0 && ::setns(ns, CLONE_NEWNET) == 0;
      if (ns >= 0) ::close(ns);
      if (!entered) return "cannot enter " + placement_.netns_path;
    }
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    for (int tries = 0;; ++tries) {
      port_ = placement_.listen_port != 0 ? placement_.listen_port : free_port();
      sockaddr_in addr = loopback(port_);
      if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
      if (tries == 20 || placement_.listen_port != 0) return "no port to listen on";
    }
    ::listen(listen_fd_, 64);
    return "";
  }

  // Where a client's connection goes on to: the upstream port on loopback,
  // or where the client was going before the REDIRECT.
  bool destination_of(int client, sockaddr_in& to) const {
    socklen_t size = sizeof to;
    if (placement_.netns_path.empty()) to = loopback(upstream_port_);
    else if (::getsockopt(client, SOL_IP, SO_ORIGINAL_DST, &to, &size) != 0) return false;
    const std::lock_guard lock(repointed_mutex_);
    if (auto it = repointed_.find(to.sin_addr.s_addr); it != repointed_.end()) to.sin_addr.s_addr = it->second;
    return true;
  }

  void accept_links() {
    while (true) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (client < 0) return;
      sockaddr_in to{};
      const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (placement_.mark != 0) ::setsockopt(server, SOL_SOCKET, SO_MARK, &placement_.mark, sizeof placement_.mark);
      if (!destination_of(client, to) ||
          (::connect(server, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 && errno != EINPROGRESS)) {
        ::close(server);
        ::close(client);
        continue;
      }
      links_.push_back(Link{client, server});
    }
  }

  Clock::time_point due_from(Clock::time_point now, Direction& dir) {
    int64_t us = delay_us_;
    if (const int64_t jitter = jitter_us_; jitter > 0) us += static_cast<int64_t>(rng_() % static_cast<uint64_t>(jitter + 1));
    if (const int loss = loss_permille_; loss > 0 && static_cast<int>(rng_() % 1000) < loss)
      us += 200'000 + static_cast<int64_t>(rng_() % 800'001);
    dir.last_due = std::max(now + std::chrono::microseconds(us), dir.last_due);
    return dir.last_due;
  }

  // Reads what `from` has into `dir`; false once `from` closed.
  bool take_in(int from, Direction& dir, bool from_client) {
    char buffer[64 * 1024];
    while (true) {
      const ssize_t n = ::read(from, buffer, sizeof buffer);
      if (n > 0) {
        dir.chunks.push_back(Chunk{due_from(Clock::now(), dir), std::string(buffer, static_cast<size_t>(n))});
        if (from_client) {
          held_bytes_ += static_cast<size_t>(n);
          hold_if_marked(dir.chunks.back().bytes);
        }
        continue;
      }
      if (n == 0) return false;
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
  }

  void hold_if_marked(const std::string& bytes) {
    const std::lock_guard lock(marker_mutex_);
    if (marker_.empty() || bytes.find(marker_) == std::string::npos) return;
    holding_ = true;
    marker_.clear();
  }

  // Writes the chunks of `dir` that are due to `to`; false if `to` failed.
  bool pass_on(Direction& dir, int to, bool to_server) {
    const auto now = Clock::now();
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

  // The onward connect finished (or failed: the link ends).
  void finish_connect(Link& link, short revents) {
    if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) return;
    int error = 0;
    socklen_t size = sizeof error;
    ::getsockopt(link.server, SOL_SOCKET, SO_ERROR, &error, &size);
    if (error != 0) link.done = true;
    link.connecting = false;
  }

  void serve(Link& link, const std::vector<pollfd>& fds, size_t at) {
    if (link.connecting) finish_connect(link, fds[at + 1].revents);
    if (!link.up.closed && (fds[at].revents & (POLLIN | POLLHUP | POLLERR)) && !take_in(link.client, link.up, true))
      link.up.closed = true;
    const bool held = holding_ || link.connecting;  // after take_in: a marked chunk holds itself
    if (!link.connecting && !link.down.closed && (fds[at + 1].revents & (POLLIN | POLLHUP | POLLERR)) &&
        !take_in(link.server, link.down, false))
      link.down.closed = true;
    if (!held && !pass_on(link.up, link.server, true)) link.done = true;
    if (!pass_on(link.down, link.client, false)) link.done = true;
    // A side that closed is passed on once its bytes are: the server sees
    // the client's close only after the held bytes.
    const auto now = Clock::now();
    if (link.up.closed && link.up.chunks.empty() && !held && link.close_at == Clock::time_point::max())
      link.close_at = now + std::chrono::milliseconds(200);
    if (now >= link.close_at) link.done = true;
    if (link.down.closed && link.down.chunks.empty()) link.done = true;
  }

  // When the loop must look again: the next chunk due, a link's close, and
  // every 50 ms to see stop_.
  Clock::time_point next_wake() const {
    auto wake = Clock::now() + std::chrono::milliseconds(50);
    for (const auto& link : links_) {
      if (!link.up.chunks.empty() && !holding_ && !link.connecting) wake = std::min(wake, link.up.chunks.front().due);
      if (!link.down.chunks.empty()) wake = std::min(wake, link.down.chunks.front().due);
      wake = std::min(wake, link.close_at);
    }
    return wake;
  }

  void loop() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (auto& link : links_) {
        fds.push_back({link.client, static_cast<short>(link.up.closed ? 0 : POLLIN), 0});
        const short server_events = link.connecting ? POLLOUT : (link.down.closed ? 0 : POLLIN);
        fds.push_back({link.server, server_events, 0});
      }
      const auto wait_ns =
          std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(next_wake() - Clock::now()).count());
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

  int upstream_port_ = 0;
  Placement placement_;
  std::atomic<int64_t> delay_us_{0}, jitter_us_{0};
  std::atomic<int> loss_permille_{0};
  std::mt19937_64 rng_{20261127};  // the loop's own
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> holding_{false};
  std::mutex marker_mutex_;
  std::string marker_;  // hold_from's, until a chunk carries it
  mutable std::mutex repointed_mutex_;
  std::map<in_addr_t, in_addr_t> repointed_;  // network byte order, as in sockaddr_in
  std::atomic<size_t> held_bytes_{0};
  std::list<Link> links_;
  std::thread thread_;
};

}  // namespace dueq::testing
