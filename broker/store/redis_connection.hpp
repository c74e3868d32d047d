#pragma once
// RAII over hiredis: one blocking connection with a command timeout, used in
// pipelined rounds (append many commands, then read all replies).
#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "common/redis_url.hpp"

namespace dueq::broker {

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* context) const { redisFree(context); }
};

// One Redis command as owned argument strings.
class Command {
 public:
  Command() = default;
  explicit Command(std::initializer_list<std::string_view> args) {
    for (auto a : args) add(a);
  }
  Command& add(std::string_view arg) {
    args_.emplace_back(arg);
    return *this;
  }
  Command& add(int64_t number) { return add(std::string_view(std::to_string(number))); }
  const std::vector<std::string>& args() const { return args_; }

  // An EVALSHA of a script that includes lua/lib/fence.lua (set by
  // script_call): the connection appends the fence before sending it.
  void mark_fenced() { fence_pending_ = true; }
  // EVALSHA sha numkeys keys... args... becomes EVALSHA sha numkeys+K
  // keys... `fence_keys`(K) args... `arg`; once.
  void append_fence(std::vector<std::string> fence_keys, std::string arg);

 private:
  std::vector<std::string> args_;
  bool fence_pending_ = false;
};

class RedisConnection {
 public:
  // With sentinels (RedisAddress::via_sentinel) the master is asked of them
  // first. Under any address a server that does not say it is a master
  // (ROLE) is refused (Errc::not_master): the broker never writes to a
  // replica, and a master demoted by a fail-over is left at the next connect.
  static Result<RedisConnection> connect(const RedisAddress& address, int timeout_ms);
  // The server at `address` itself (host/port or unix socket), sentinels or not.
  static Result<RedisConnection> connect_to(const RedisAddress& address, int timeout_ms);

  // Sends every command in one write and reads every reply. A reply that is
  // a Redis error is returned as a reply (callers inspect it); only a lost or
  // broken connection is an Error, after which the connection is unusable.
  Result<std::vector<ReplyPtr>> pipeline(const std::vector<Command>& commands);
  Result<ReplyPtr> run(const Command& command);

  // pipeline() in two halves, so the caller can do other work while Redis
  // runs the commands: send() writes them all, receive() reads `count`
  // replies (blocking up to the connection timeout).
  Result<void> send(const std::vector<Command>& commands);
  Result<std::vector<ReplyPtr>> receive(size_t count);
  int fd() const { return context_->fd; }
  // Bytes already read from the socket but not yet parsed: the next replies
  // may be complete in there, so the socket need not become readable again.
  bool has_buffered_input() const { return context_->reader->pos < context_->reader->len; }

  bool broken() const { return broken_; }

 private:
  explicit RedisConnection(redisContext* context) : context_(context) {}
  // The master's address as the first sentinel that knows it says.
  static Result<RedisAddress> ask_sentinels(const RedisAddress& address, int timeout_ms);
  std::unique_ptr<redisContext, ContextDeleter> context_;
  bool broken_ = false;
  std::string request_;  // send()'s commands in RESP; kept to reuse its capacity
};

// Short text of an error reply, or "" when the reply is not an error.
std::string_view reply_error(const redisReply* reply);
// What a ROLE reply says the server is ("master", "slave", "sentinel"), or
// "unknown" for any other reply.
std::string_view role_of(const redisReply* reply);

}  // namespace dueq::broker
