#include "broker/http/http_front.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cctype>
#include <system_error>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/clock.hpp"

namespace dueq::broker {

namespace {

const char* status_text(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    default: return "Bad Gateway";
  }
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return out;
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

bool would_block() { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

constexpr size_t kReadChunk = size_t{16} * 1024;

}  // namespace

RequestSize http_request_size(std::string_view in, size_t max_body_bytes) {
  constexpr size_t kMaxHeadBytes = HttpFront::kMaxHeadBytes;
  const size_t head_end = in.find("\r\n\r\n");
  if (head_end == std::string_view::npos || head_end + 4 > kMaxHeadBytes) {
    if (in.size() > kMaxHeadBytes) return {0, 431, fmt::format("the request head is longer than {} bytes", kMaxHeadBytes)};
    return {};
  }
  size_t length = 0;
  std::string_view head = in.substr(0, head_end);
  const size_t request_line_end = head.find("\r\n");  // the request line has no header
  head.remove_prefix(request_line_end == std::string_view::npos ? head.size() : request_line_end + 2);
  while (!head.empty()) {
    const size_t eol = std::min(head.find("\r\n"), head.size());
    const std::string_view line = head.substr(0, eol);
    head.remove_prefix(std::min(head.size(), eol + 2));
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name = lower(trimmed(line.substr(0, colon)));
    const std::string_view value = trimmed(line.substr(colon + 1));
    if (name == "transfer-encoding") return {0, 411, "send a Content-Length: chunked request bodies are not taken"};
    if (name != "content-length") continue;
    if (value.empty() || value.size() > 10 || !std::all_of(value.begin(), value.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      return {0, 400, "Content-Length is not a number"};
    length = std::stoull(std::string(value));
  }
  if (length > max_body_bytes) return {0, 413, fmt::format("the request body is longer than {} bytes", max_body_bytes)};
  return {head_end + 4 + length, 0, {}};
}

Result<int> HttpFront::start(const std::string& host, int port, int backend_port, size_t max_body_bytes) {
  backend_port_ = backend_port;
  max_body_bytes_ = max_body_bytes;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr)
    return fail(Errc::bad_argument, fmt::format("http: cannot resolve {}", host));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  listen_fd_ = UniqueFd(::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (listen_fd_.get() < 0 || ::bind(listen_fd_.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      ::listen(listen_fd_.get(), 1024) != 0)
    return fail(Errc::bad_argument,
                fmt::format("http: cannot listen on {}:{}: {}", host, port, std::generic_category().message(errno)));
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  ::getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len);
  const int bound_port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  epoll_fd_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  stop_fd_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  for (const int fd : {listen_fd_.get(), stop_fd_.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev);
  }
  thread_ = std::thread([this] { loop(); });
  return bound_port;
}

void HttpFront::stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(stop_fd_.get(), &one, sizeof one);
  thread_.join();
  by_fd_.clear();
  conns_.clear();
}

void HttpFront::loop() {
  std::array<epoll_event, 256> events{};
  while (true) {
    // Wakes at least every 100 ms to close what is past its deadline.
    const int n = ::epoll_wait(epoll_fd_.get(), events.data(), static_cast<int>(events.size()), 100);
    const int64_t now = steady_ms();
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == stop_fd_.get()) return;
      if (fd == listen_fd_.get()) {
        accept_all(now);
        continue;
      }
      auto it = by_fd_.find(fd);
      if (it == by_fd_.end()) continue;  // closed by an earlier event of this batch
      const ConnPtr c = it->second;
      try {
        on_event(c, fd, events[static_cast<size_t>(i)].events, now);
      } catch (const std::exception& e) {
        spdlog::warn("http: dropped a connection: {}", e.what());
        close(c);
      }
    }
    expire(now);
  }
}

void HttpFront::accept_all(int64_t now) {
  for (int accepted = 0; accepted < 256; ++accepted) {
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.get() < 0) return;
    if (conns_.size() >= kMaxConnections) {
      // The one that has waited longest for its request makes room.
      ConnPtr oldest;
      for (const auto& [raw, c] : conns_)
        if (c->phase == Phase::reading && (!oldest || c->accepted_ms < oldest->accepted_ms)) oldest = c;
      if (!oldest) continue;  // every slot is answering: this one is closed
      close(oldest);
    }
    auto c = std::make_shared<Conn>();
    c->client = std::move(fd);
    c->accepted_ms = now;
    c->deadline_ms = now + kRequestDeadlineMs;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = c->client.get();
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, c->client.get(), &ev) != 0) continue;
    by_fd_[c->client.get()] = c;
    conns_[c.get()] = c;
  }
}

void HttpFront::on_event(const ConnPtr& c, int fd, uint32_t events, int64_t now) {
  if (fd == c->client.get()) {
    if (c->phase == Phase::reading) return read_request(c, now);
    if (c->phase == Phase::lingering) return drop_input(c);
    if (events & (EPOLLHUP | EPOLLERR)) return close(c);
  } else if (c->phase == Phase::forwarding) {
    if ((events & EPOLLOUT) && c->in_sent < c->in.size()) {
      int error = 0;
      socklen_t len = sizeof error;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error != 0) return answer_self(c, 502, "the HTTP server did not take the request");
      const ssize_t n = ::send(fd, c->in.data() + c->in_sent, c->in.size() - c->in_sent, MSG_NOSIGNAL);
      if (n < 0 && !would_block()) return answer_self(c, 502, "the HTTP server did not take the request");
      if (n > 0) c->in_sent += static_cast<size_t>(n);
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
      std::array<char, kReadChunk> buffer{};
      while (c->out.size() < kMaxBufferedAnswer) {
        const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n > 0) {
          c->out.append(buffer.data(), static_cast<size_t>(n));
          continue;
        }
        if (n == 0 || !would_block()) c->backend_done = true;
        break;
      }
    }
  }
  forward(c);
}

void HttpFront::read_request(const ConnPtr& c, int64_t now) {
  std::array<char, kReadChunk> buffer{};
  const size_t most = kMaxHeadBytes + max_body_bytes_;
  while (true) {
    const ssize_t n = ::recv(c->client.get(), buffer.data(), buffer.size(), 0);
    if (n == 0 || (n < 0 && !would_block())) return close(c);  // gone before its request was whole
    if (n < 0) break;
    c->in.append(buffer.data(), static_cast<size_t>(n));
    if (c->in.size() > most) break;
  }
  const RequestSize need = http_request_size(c->in, max_body_bytes_);
  if (need.status != 0) return answer_self(c, need.status, need.reason);
  if (need.bytes == 0 || c->in.size() < need.bytes) return;
  c->in.resize(need.bytes);  // anything after the request is not read: one request per connection
  UniqueFd backend(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(backend_port_));
  if (backend.get() < 0 ||
      (::connect(backend.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS))
    return answer_self(c, 502, "the HTTP server is not reachable");
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLIN;
  ev.data.fd = backend.get();
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, backend.get(), &ev) != 0)
    return answer_self(c, 502, "the HTTP server is not reachable");
  c->backend = std::move(backend);
  by_fd_[c->backend.get()] = c;
  c->phase = Phase::forwarding;
  c->deadline_ms = now + kAnswerDeadlineMs;
  watch(c);
}

// Passes what the client may take on to it; closes once all is passed on.
void HttpFront::forward(const ConnPtr& c) {
  if (!c->out.empty()) {
    const ssize_t n = ::send(c->client.get(), c->out.data(), c->out.size(), MSG_NOSIGNAL);
    if (n < 0 && !would_block()) return close(c);
    if (n > 0) c->out.erase(0, static_cast<size_t>(n));
  }
  if (c->phase == Phase::answering_self && c->out.empty()) {
    ::shutdown(c->client.get(), SHUT_WR);
    c->phase = Phase::lingering;
    return drop_input(c);
  }
  if (c->backend_done && c->out.empty()) return close(c);
  watch(c);
}

void HttpFront::drop_input(const ConnPtr& c) {
  std::array<char, kReadChunk> buffer{};
  while (true) {
    const ssize_t n = ::recv(c->client.get(), buffer.data(), buffer.size(), 0);
    if (n == 0 || (n < 0 && !would_block())) return close(c);
    if (n < 0) break;
  }
  watch(c);
}

void HttpFront::answer_self(const ConnPtr& c, int status, const std::string& reason) {
  if (c->backend.get() >= 0) {
    by_fd_.erase(c->backend.get());
    c->backend.reset();
  }
  c->phase = Phase::answering_self;
  c->deadline_ms = steady_ms() + kLingerMs;
  const std::string body = reason + "\n";
  c->out = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                       status, status_text(status), body.size(), body);
  forward(c);
}

void HttpFront::watch(const ConnPtr& c) {
  epoll_event ev{};
  ev.data.fd = c->client.get();
  ev.events = c->phase == Phase::reading || c->phase == Phase::lingering
                  ? EPOLLIN
                  : (c->out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c->client.get(), &ev);
  if (c->backend.get() < 0) return;
  epoll_event back{};
  back.data.fd = c->backend.get();
  if (c->in_sent < c->in.size()) back.events |= EPOLLOUT;
  if (!c->backend_done && c->out.size() < kMaxBufferedAnswer) back.events |= EPOLLIN;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c->backend.get(), &back);
}

void HttpFront::close(const ConnPtr& c) {
  by_fd_.erase(c->client.get());
  if (c->backend.get() >= 0) by_fd_.erase(c->backend.get());
  conns_.erase(c.get());  // the descriptors close with the last reference
}

void HttpFront::expire(int64_t now) {
  std::vector<ConnPtr> late;
  for (const auto& [raw, c] : conns_)
    if (now >= c->deadline_ms) late.push_back(c);
  for (const auto& c : late) {
    if (c->phase == Phase::reading) answer_self(c, 408, fmt::format("the request took longer than {} ms", kRequestDeadlineMs));
    else close(c);
  }
}

}  // namespace dueq::broker
