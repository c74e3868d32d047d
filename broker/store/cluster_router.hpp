#pragma once
// A Redis Cluster behind one transport: each command goes to the master of
// its first key's slot (a queue's keys share one, see broker/store/keys.hpp), a
// batch is split into one pipeline per master and its replies are put back
// in order. MOVED updates the slot map and sends the command again there;
// ASK sends a plain command once to the importing node after ASKING. A
// script is not sent on by ASK, and TRYAGAIN is not retried here: while a
// queue's slot moves its scripts are refused (lua/lib/fence.lua) and the
// broker's refusal back-off tries them later, without stalling the loop.
// Each of these answers means the command did not run. A lost node breaks the transport; the next connect
// reads the slot map again (after a fail-over it names the promoted
// replica). Commands without a key go with their neighbours (MULTI/EXEC) or
// to the first master; WAIT goes to every master the batch wrote to (to
// every master when it wrote to none) and answers the fewest replicas any
// of them reached.
#include <array>
#include <deque>
#include <memory>
#include <optional>

#include "broker/store/cluster_slots.hpp"
#include "broker/store/redis_transport.hpp"
#include "common/redis_url.hpp"

namespace dueq::broker {

class ClusterRouter : public RedisTransport {
 public:
  using NodeSetup = std::function<Result<void>(RedisConnection&)>;
  // Reads the slot map from the first seed that answers and connects to
  // every master, running `setup` on each (and on masters met later).
  static Result<std::unique_ptr<ClusterRouter>> connect(const RedisAddress& address, int timeout_ms, NodeSetup setup);

  Result<void> send(const std::vector<Command>& commands) override;
  Result<std::vector<ReplyPtr>> receive(size_t count) override;
  int fd() const override;
  bool has_buffered_input() const override;
  bool broken() const override { return broken_; }
  Result<void> each_server(const std::function<Result<void>(RedisConnection&)>& setup) override;

 private:
  ClusterRouter(RedisAddress address, int timeout_ms, NodeSetup setup)
      : address_(std::move(address)), timeout_ms_(timeout_ms), setup_(std::move(setup)) {}

  struct Node {
    HostPort at;
    RedisConnection connection;
  };
  struct Part {
    size_t node = 0;
    std::vector<size_t> indexes;  // into the batch, in order
  };
  struct Batch {
    std::vector<Command> commands;
    std::vector<Part> parts;
    std::optional<std::vector<ReplyPtr>> replies;  // read ahead before a redirect was followed
  };

  // The node at `at`, connected (and set up) when it is new.
  Result<size_t> node_at(const HostPort& at);
  size_t node_of_key(std::string_view key) const { return slot_node_[key_slot(key)]; }
  // The node command `i` of `commands` goes to; nullopt for WAIT.
  std::optional<size_t> route(const std::vector<Command>& commands, size_t i) const;
  Result<std::vector<ReplyPtr>> read(Batch& batch);
  // Follows MOVED (and ASK for commands that are not scripts).
  Result<void> follow_redirects(Batch& batch, std::vector<ReplyPtr>& replies);
  Result<void> fail(Error error) {
    broken_ = true;
    return std::unexpected(std::move(error));
  }

  RedisAddress address_;
  int timeout_ms_;
  NodeSetup setup_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::array<size_t, kClusterSlots> slot_node_{};
  std::deque<Batch> sent_;
  bool broken_ = false;
};

}  // namespace dueq::broker
