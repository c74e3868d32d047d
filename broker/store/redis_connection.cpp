#include "broker/store/redis_connection.hpp"

#include <charconv>

namespace dueq::broker {

namespace {

timeval to_timeval(int ms) { return timeval{ms / 1000, static_cast<suseconds_t>(ms % 1000) * 1000}; }

}  // namespace

void Command::append_fence(std::vector<std::string> fence_keys, std::string arg) {
  if (!fence_pending_ || args_.size() < 3) return;
  fence_pending_ = false;
  size_t keys = 0;
  const std::string& count = args_[2];
  if (std::from_chars(count.data(), count.data() + count.size(), keys).ec != std::errc{} || 3 + keys > args_.size()) return;
  args_[2] = std::to_string(keys + fence_keys.size());
  args_.insert(args_.begin() + static_cast<std::ptrdiff_t>(3 + keys), std::make_move_iterator(fence_keys.begin()),
               std::make_move_iterator(fence_keys.end()));
  args_.push_back(std::move(arg));
}

std::string_view reply_error(const redisReply* reply) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ERROR) return {};
  return std::string_view(reply->str, reply->len);
}

std::string_view role_of(const redisReply* reply) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements == 0 || reply->element[0]->type != REDIS_REPLY_STRING)
    return "unknown";
  return {reply->element[0]->str, reply->element[0]->len};
}

Result<RedisAddress> RedisConnection::ask_sentinels(const RedisAddress& address, int timeout_ms) {
  std::string failures;
  for (const auto& sentinel : address.sentinels) {
    RedisAddress at;
    at.host = sentinel.host;
    at.port = sentinel.port;
    at.user = address.sentinel_user;
    at.password = address.sentinel_password;
    const std::string where = sentinel.host + ":" + std::to_string(sentinel.port);
    auto conn = connect_to(at, timeout_ms);
    if (!conn) {
      failures += "; " + where + ": " + conn.error().message;
      continue;
    }
    auto reply = conn->run(Command{"SENTINEL", "get-master-addr-by-name", address.master_name});
    if (!reply) {
      failures += "; " + where + ": " + reply.error().message;
      continue;
    }
    const redisReply* r = reply->get();
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING) {
      failures += "; " + where + ": " + (reply_error(r).empty() ? "does not know it" : std::string(reply_error(r)));
      continue;
    }
    int port = 0;
    const std::string_view port_text(r->element[1]->str, r->element[1]->len);
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
      failures += "; " + where + ": a bad port '" + std::string(port_text) + "'";
      continue;
    }
    RedisAddress master = address;
    master.sentinels.clear();
    master.host.assign(r->element[0]->str, r->element[0]->len);
    master.port = port;
    return master;
  }
  return fail(Errc::unavailable, "no sentinel gave the address of master '" + address.master_name + "'" + failures);
}

// Whatever the URL, the server must say it is a master: a plain address
// may point at a demoted master, or at a replica after a fail-over.
Result<RedisConnection> RedisConnection::connect(const RedisAddress& address, int timeout_ms) {
  RedisAddress server = address;
  if (address.via_sentinel()) {
    auto master = ask_sentinels(address, timeout_ms);
    if (!master) return std::unexpected(master.error());
    server = std::move(*master);
  }
  auto conn = connect_to(server, timeout_ms);
  if (!conn) return std::unexpected(conn.error());
  auto role = conn->run(Command{"ROLE"});
  if (!role) return std::unexpected(role.error());
  const std::string_view said = role_of(role->get());
  if (said == "master") return conn;
  if (address.via_sentinel())
    return fail(Errc::not_master, "the sentinels name " + server.describe() + " as master '" + address.master_name +
                                      "', but it says it is a " + std::string(said) + " (a fail-over under way?)");
  return fail(Errc::not_master, "Redis at " + server.describe() + " is a " + std::string(said) +
                                    ", not a master: dueq writes only to a master");
}

Result<RedisConnection> RedisConnection::connect_to(const RedisAddress& address, int timeout_ms) {
  const timeval timeout = to_timeval(timeout_ms);
  redisContext* raw = address.unix_path.empty()
                          ? redisConnectWithTimeout(address.host.c_str(), address.port, timeout)
                          : redisConnectUnixWithTimeout(address.unix_path.c_str(), timeout);
  if (raw == nullptr) return fail(Errc::unavailable, "cannot allocate a Redis context");
  RedisConnection conn(raw);
  if (raw->err) return fail(Errc::unavailable, "cannot connect to Redis at " + address.describe() + ": " + raw->errstr);
  redisSetTimeout(raw, timeout);
  if (address.unix_path.empty()) redisEnableKeepAlive(raw);
  if (!address.password.empty()) {
    auto reply = conn.run(address.user.empty() ? Command{"AUTH", address.password}
                                               : Command{"AUTH", address.user, address.password});
    if (!reply) return std::unexpected(reply.error());
    if (auto err = reply_error(reply->get()); !err.empty())
      return fail(Errc::refused, "Redis AUTH failed: " + std::string(err));
  } else {
    // A Redis that wants a password answers every command NOAUTH: say so
    // now rather than as a failure of whatever runs first.
    auto reply = conn.run(Command{"PING"});
    if (!reply) return std::unexpected(reply.error());
    if (auto err = reply_error(reply->get()); err.starts_with("NOAUTH"))
      return fail(Errc::refused, "Redis needs a password (put it in the URL: redis://[user]:password@host): " + std::string(err));
  }
  if (address.db != 0) {
    auto reply = conn.run(Command{"SELECT", std::to_string(address.db)});
    if (!reply) return std::unexpected(reply.error());
    if (auto err = reply_error(reply->get()); !err.empty())
      return fail(Errc::unavailable, "Redis SELECT failed: " + std::string(err));
  }
  return conn;
}

Result<std::vector<ReplyPtr>> RedisConnection::pipeline(const std::vector<Command>& commands) {
  if (auto sent = send(commands); !sent) return std::unexpected(sent.error());
  return receive(commands.size());
}

namespace {

void append_header(std::string& out, char kind, size_t number) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, number).ptr;
  out += kind;
  out.append(digits, end);
  out += "\r\n";
}

}  // namespace

Result<void> RedisConnection::send(const std::vector<Command>& commands) {
  if (broken_) return fail(Errc::unavailable, "Redis connection is broken");
  // The commands as RESP arrays of bulk strings in one buffer, appended to
  // hiredis's output at once: hiredis's own formatter (one sds per command,
  // sdscatfmt per argument) took 6% of the broker's CPU with single jobs.
  request_.clear();
  for (const auto& command : commands) {
    append_header(request_, '*', command.args().size());
    for (const auto& arg : command.args()) {
      append_header(request_, '$', arg.size());
      request_ += arg;
      request_ += "\r\n";
    }
  }
  if (redisAppendFormattedCommand(context_.get(), request_.data(), request_.size()) != REDIS_OK) {
    broken_ = true;
    return fail(Errc::unavailable, std::string("Redis append failed: ") + context_->errstr);
  }
  // The socket is blocking: redisBufferWrite returns once all is written
  // (or on an error/timeout).
  for (int done = 0; !done;) {
    if (redisBufferWrite(context_.get(), &done) != REDIS_OK) {
      broken_ = true;
      return fail(Errc::unavailable, std::string("Redis write failed: ") + context_->errstr);
    }
  }
  return {};
}

Result<std::vector<ReplyPtr>> RedisConnection::receive(size_t count) {
  if (broken_) return fail(Errc::unavailable, "Redis connection is broken");
  std::vector<ReplyPtr> replies;
  replies.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_.get(), &raw) != REDIS_OK || raw == nullptr) {
      broken_ = true;
      return fail(Errc::unavailable, std::string("Redis connection lost: ") + context_->errstr);
    }
    replies.emplace_back(static_cast<redisReply*>(raw));
  }
  return replies;
}

Result<ReplyPtr> RedisConnection::run(const Command& command) {
  auto replies = pipeline({command});
  if (!replies) return std::unexpected(replies.error());
  return std::move(replies->front());
}

}  // namespace dueq::broker
