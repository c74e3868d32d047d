#pragma once
// One Redis connection (or one per master of a Redis Cluster,
// broker/store/cluster_router.hpp) that runs dueq's Lua scripts: connects, loads every
// script in lua/ (SCRIPT LOAD must answer the SHA1 the build computed), sends
// rounds pipelined, and recovers a lost script cache (Redis restarted or
// failed over, SCRIPT FLUSH): the scripts are reloaded and the calls Redis
// refused with NOSCRIPT are sent again in their original order. A refused
// call did nothing, so sending it again is safe.
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "broker/store/redis_budget.hpp"
#include "broker/store/cluster_router.hpp"
#include "broker/store/redis_connection.hpp"
#include "broker/store/redis_transport.hpp"
#include "broker/store/round.hpp"
#include "common/error.hpp"
#include "common/redis_url.hpp"

namespace dueq::broker {

class RedisClient {
 public:
  explicit RedisClient(RedisAddress address, int timeout_ms = 2000)
      : address_(std::move(address)), timeout_ms_(timeout_ms) {}

  // Connects and loads the scripts. Safe to call again after a failure.
  Result<void> connect();
  bool connected() const { return transport_ && !transport_->broken(); }
  void disconnect() {
    transport_.reset();
    outstanding_.clear();
  }

  // Pipelined rounds. send() writes a round's calls and returns; receive()
  // reads the replies of the oldest round sent (blocking up to the timeout;
  // a caller with other work polls socket_fd() first, unless
  // replies_buffered()). The caller keeps the round to apply the replies.
  Result<void> send(Round& round);
  Result<std::vector<ReplyPtr>> receive();
  size_t outstanding() const { return outstanding_.size(); }
  int socket_fd() const { return transport_ ? transport_->fd() : -1; }
  // The oldest round's replies may already be read off the socket (they
  // arrived with the previous round's): then the socket never turns readable.
  bool replies_buffered() const { return transport_ && transport_->has_buffered_input(); }

  // Sends a round, waits and runs its continuations (failed ones when the
  // connection broke). Refused while pipelined rounds are outstanding.
  Result<void> execute(Round& round);
  // One call or command (scripts recovered like any round).
  Result<ReplyPtr> call(Command command);
  // Several, in one round trip.
  Result<std::vector<ReplyPtr>> pipeline(std::vector<Command> commands);

  // Background work (admin, audits) shares Redis with the event loop: each
  // synchronous call takes its turn in `budget`, which paces all of its
  // connections together (broker/store/redis_budget.hpp). Without one, calls are
  // not paced.
  void set_budget(std::shared_ptr<RedisBudget> budget) { budget_ = std::move(budget); }
  // The event loop's client: every command it sends is counted in `budget`,
  // whose background work takes a larger share while the loop is quiet.
  void count_commands_in(std::shared_ptr<RedisBudget> budget) { counted_in_ = std::move(budget); }
  // Once `*stop` is set, every call fails at once ("stopping"): long admin
  // work ends at its next step when the broker stops.
  void set_stop_flag(const std::atomic<bool>* stop) { stop_ = stop; }
  // Each connection this client opens from then on tells Redis who it is
  // (CLIENT SETNAME, e.g. "dueq-loop"), so that an operator's CLIENT LIST
  // shows which of the broker's threads holds it. Best effort: a server
  // whose ACL refuses the command is used all the same. No spaces.
  void set_name(std::string name) { name_ = std::move(name); }

  // Reads must come from a master (the admin thread's: a search or a lookup
  // on a master demoted under the open connection, a replica that may lag,
  // would answer without the newest writes, and only writes are refused
  // READONLY): each pipeline() then sends ROLE first, in the same round
  // trip, and fails (Errc::not_master, disconnected) when the server is no
  // longer a master. Not in a Redis Cluster, whose replicas answer MOVED.
  void set_reads_from_master_only(bool on) { reads_from_master_only_ = on; }

  // Every call of a script that writes goes out with the queue's epoch key
  // and this leader epoch appended (lua/lib/fence.lua); before it is set
  // (0) such calls fail in Redis and write nothing.
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  bool in_cluster() const { return address_.via_cluster(); }
  // A reply said a newer leader took over: the round it ended failed like
  // a lost connection (Errc::fenced), and this broker must stand down.
  bool fenced() const { return fenced_; }

 private:
  static Result<void> prepare(RedisConnection& server, const std::string& name);
  Result<void> recover_lost_scripts();
  Command with_fence(Command call) const;

  struct OutstandingRound {
    std::vector<Command> commands;
    std::optional<std::vector<ReplyPtr>> replies;  // read ahead by recover_lost_scripts
  };

  RedisAddress address_;
  int timeout_ms_;
  std::string name_;
  std::unique_ptr<RedisTransport> transport_;  // one server, or a Redis Cluster
  std::deque<OutstandingRound> outstanding_;
  std::shared_ptr<RedisBudget> budget_;
  std::shared_ptr<RedisBudget> counted_in_;
  const std::atomic<bool>* stop_ = nullptr;
  uint64_t epoch_ = 0;
  bool fenced_ = false;
  bool reads_from_master_only_ = false;
};

}  // namespace dueq::broker
