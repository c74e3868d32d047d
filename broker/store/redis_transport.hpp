#pragma once
// What RedisClient sends its rounds through: one server (SingleServer:
// a redis://, unix:// or sentinel:// address) or a Redis Cluster
// (broker/store/cluster_router.hpp). Either way a batch of commands goes out in
// one send() and its replies come back in order from receive().
#include <functional>
#include <memory>
#include <vector>

#include "broker/store/redis_connection.hpp"
#include "common/error.hpp"

namespace dueq::broker {

class RedisTransport {
 public:
  virtual ~RedisTransport() = default;
  virtual Result<void> send(const std::vector<Command>& commands) = 0;
  // The replies of the oldest batch sent, in its order; `count` is its size.
  virtual Result<std::vector<ReplyPtr>> receive(size_t count) = 0;
  Result<std::vector<ReplyPtr>> pipeline(const std::vector<Command>& commands) {
    if (auto ok = send(commands); !ok) return std::unexpected(ok.error());
    return receive(commands.size());
  }
  // The socket that turns readable when the oldest batch's replies arrive.
  virtual int fd() const = 0;
  virtual bool has_buffered_input() const = 0;
  virtual bool broken() const = 0;
  // Runs `setup` on the connection to every server (loading the scripts).
  virtual Result<void> each_server(const std::function<Result<void>(RedisConnection&)>& setup) = 0;
};

class SingleServer : public RedisTransport {
 public:
  explicit SingleServer(RedisConnection connection) : connection_(std::move(connection)) {}
  Result<void> send(const std::vector<Command>& commands) override { return connection_.send(commands); }
  Result<std::vector<ReplyPtr>> receive(size_t count) override { return connection_.receive(count); }
  int fd() const override { return connection_.fd(); }
  bool has_buffered_input() const override { return connection_.has_buffered_input(); }
  bool broken() const override { return connection_.broken(); }
  Result<void> each_server(const std::function<Result<void>(RedisConnection&)>& setup) override {
    return setup(connection_);
  }

 private:
  RedisConnection connection_;
};

}  // namespace dueq::broker
