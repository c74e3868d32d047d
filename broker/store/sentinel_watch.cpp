#include "broker/store/sentinel_watch.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>

#include <spdlog/spdlog.h>

#include "broker/store/redis_connection.hpp"

namespace dueq::broker {

namespace {
constexpr int kTimeoutMs = 1'000;
constexpr int kPollMs = 200;  // how often a quiet subscription checks for stop()
}  // namespace

SentinelWatch::SentinelWatch(RedisAddress address)
    : address_(std::move(address)), ready_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

std::string SentinelWatch::take_announcement() {
  uint64_t count = 0;
  [[maybe_unused]] auto n = ::read(ready_.get(), &count, sizeof count);
  std::lock_guard lock(thread_.mutex());
  return std::exchange(announcement_, {});
}

void SentinelWatch::run() {
  while (!thread_.stopping()) {
    for (const auto& sentinel : address_.sentinels) {
      if (thread_.stopping()) return;
      watch(sentinel);
    }
    thread_.wait_for(std::chrono::milliseconds(500));
  }
}

void SentinelWatch::watch(const HostPort& sentinel) {
  RedisAddress at;
  at.host = sentinel.host;
  at.port = sentinel.port;
  at.user = address_.sentinel_user;
  at.password = address_.sentinel_password;
  auto conn = RedisConnection::connect_to(at, kTimeoutMs);
  if (!conn) return;
  if (!conn->send({Command{"SUBSCRIBE", "+switch-master"}})) return;
  while (!thread_.stopping()) {
    if (!conn->has_buffered_input()) {
      pollfd readable{conn->fd(), POLLIN, 0};
      const int ready = ::poll(&readable, 1, kPollMs);
      if (ready < 0 && errno != EINTR) return;
      if (ready <= 0) continue;
    }
    auto replies = conn->receive(1);
    if (!replies) return;
    const redisReply* r = replies->front().get();
    // ["message", "+switch-master", "<name> <old-ip> <old-port> <new-ip> <new-port>"]
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[2]->type != REDIS_REPLY_STRING) continue;
    const std::string text(r->element[2]->str, r->element[2]->len);
    if (!text.starts_with(address_.master_name + " ")) continue;
    {
      std::lock_guard lock(thread_.mutex());
      announcement_ = text.substr(address_.master_name.size() + 1);
    }
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(ready_.get(), &one, sizeof one);
  }
}

}  // namespace dueq::broker
