// The suite's link proxy (tests/support/link_proxy.hpp), on loopback: what
// it promises the faults that steer it.
#include "tests/support/link_proxy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "tests/support/cluster.hpp"

namespace dueq::testing {
namespace {

using namespace std::chrono_literals;

// A listening socket on a free loopback port, and the one connection it
// accepts.
class Sink {
 public:
  // On `address` (any of 127/8 is this host's) and `port` (0: a free one).
  explicit Sink(const char* address = "127.0.0.1", int port = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    ::inet_pton(AF_INET, address, &addr.sin_addr);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    socklen_t size = sizeof addr;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size) != 0 || ::listen(fd_, 4) != 0)
      throw std::runtime_error("Sink: cannot listen on loopback");
    port_ = ntohs(addr.sin_port);
  }
  ~Sink() {
    if (peer_ >= 0) ::close(peer_);
    ::close(fd_);
  }
  int port() const { return port_; }
  // The first `size` bytes the peer sends (accepting it first).
  std::string read_some(size_t size) {
    if (peer_ < 0) peer_ = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    std::string out(size, '\0');
    size_t got = 0;
    for (ssize_t n; got < size && (n = ::read(peer_, out.data() + got, size - got)) > 0;) got += static_cast<size_t>(n);
    out.resize(got);
    return out;
  }
  // Everything the peer sends until it closes.
  // The next `n` bytes (fewer if the connection ends first).
  std::string read_n(size_t n) {
    if (peer_ < 0) peer_ = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    std::string out;
    char buffer[4096];
    for (ssize_t got; out.size() < n && (got = ::read(peer_, buffer, std::min(sizeof buffer, n - out.size()))) > 0;)
      out.append(buffer, static_cast<size_t>(got));
    return out;
  }

  std::string read_all() {
    if (peer_ < 0) peer_ = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    std::string out;
    char buffer[4096];
    for (ssize_t n; (n = ::read(peer_, buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<size_t>(n));
    return out;
  }

 private:
  int fd_ = -1, peer_ = -1, port_ = 0;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

TEST(LinkProxy, JitterAndStallsKeepTheOrderOfTheBytesOfAConnection) {
  Sink sink;
  LinkProxy proxy(sink.port(), 0us);
  proxy.set_link(1ms, 3ms, 300);  // almost one chunk in three stalled 0.2-1 s
  const int client = connect_to(proxy.port());
  std::string sent;
  for (int i = 0; i < 40; ++i) {
    const std::string line = std::to_string(i) + "\n";
    ASSERT_EQ(::write(client, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    sent += line;
    std::this_thread::sleep_for(2ms);  // separate chunks, each with its own draw
  }
  ::close(client);
  EXPECT_EQ(sink.read_all(), sent);
}

TEST(LinkProxy, HeldBytesOfAClosedConnectionArriveWhenReleasedAndThenTheClose) {
  Sink sink;
  LinkProxy proxy(sink.port(), 0us);
  proxy.hold();
  const int client = connect_to(proxy.port());
  ASSERT_EQ(::write(client, "late", 4), 4);
  ::close(client);
  ASSERT_TRUE(eventually([&] { return proxy.held_bytes() == 4; }, 5s));
  std::this_thread::sleep_for(300ms);  // longer than the close delay: held bytes must not go by then
  EXPECT_EQ(proxy.held_bytes(), 4U);
  proxy.release();
  EXPECT_EQ(sink.read_all(), "late");
  EXPECT_EQ(proxy.held_bytes(), 0U);
}

// hold_from: what goes before the marked chunk passes; that chunk and all
// after it (on any connection) wait for release().
TEST(LinkProxy, BytesFromTheFirstChunkCarryingTheMarkerOnAreHeld) {
  Sink sink;
  LinkProxy proxy(sink.port(), 0us);
  proxy.hold_from("MARK");
  const int client = connect_to(proxy.port());
  ASSERT_EQ(::write(client, "before;", 7), 7);
  EXPECT_EQ(sink.read_n(7), "before;");
  ASSERT_EQ(::write(client, "a MARK;", 7), 7);
  ASSERT_TRUE(eventually([&] { return proxy.held_bytes() == 7; }, 5s));
  ASSERT_EQ(::write(client, "after", 5), 5);
  ASSERT_TRUE(eventually([&] { return proxy.held_bytes() == 12; }, 5s));
  ::close(client);
  std::this_thread::sleep_for(300ms);  // longer than the close delay: held bytes must not go by then
  EXPECT_EQ(proxy.held_bytes(), 12U);
  proxy.release();
  EXPECT_EQ(sink.read_all(), "a MARK;after");
}

// As a virtual address that moves to another host: new connections go to
// the new one, an open one stays where it was.
TEST(LinkProxy, ARepointedAddressTakesNewConnectionsAndLeavesOpenOnesWhereTheyAre) {
  Sink before;
  Sink after("127.0.0.2", before.port());
  LinkProxy proxy(before.port(), 0us);
  const int open = connect_to(proxy.port());
  ASSERT_EQ(::write(open, "open", 4), 4);
  ASSERT_EQ(before.read_some(4), "open");  // its onward leg is made
  proxy.repoint("127.0.0.1", "127.0.0.2");
  const int fresh = connect_to(proxy.port());
  ASSERT_EQ(::write(fresh, "fresh", 5), 5);
  ::close(fresh);
  EXPECT_EQ(after.read_all(), "fresh");
  ASSERT_EQ(::write(open, "+more", 5), 5);
  ::close(open);
  EXPECT_EQ(before.read_all(), "+more");
  EXPECT_THROW(proxy.repoint("redis0", "127.0.0.2"), std::invalid_argument);
}

}  // namespace
}  // namespace dueq::testing
