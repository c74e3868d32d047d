#pragma once
// The brokers a worker, a producer or the CLI may talk to: one endpoint, or
// several separated by commas (a leader and its standbys, see
// docs/operations.md). One is used at a time; a client moves to the next
// when its broker answers "not_leader", drops the connection, refuses it, or
// does not answer in time.
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace dueq {

class BrokerEndpoints {
 public:
  static constexpr size_t kMaxEndpoints = 16;

  // "tcp://a:7600,tcp://b:7600": each a tcp://, ipc:// or inproc://
  // endpoint, none empty or repeated, at most kMaxEndpoints.
  static Result<BrokerEndpoints> parse(std::string_view list);

  const std::string& current() const { return endpoints_[at_]; }
  bool several() const { return endpoints_.size() > 1; }
  // Moves to the next one; true when that one is the first again (a whole
  // pass found no leader).
  bool next();
  std::string describe() const;
  // A standby's `not_leader` message names the leader ("the leader is at
  // tcp://HOST:PORT"): that endpoint joins the list, so that a client given
  // only a standby reaches the leader. True when it was added; false for a
  // message naming none, one already listed, one no client can connect to
  // (a wildcard address) or a full list.
  bool learn_leader_from(std::string_view not_leader_message);

 private:
  explicit BrokerEndpoints(std::vector<std::string> endpoints) : endpoints_(std::move(endpoints)) {}
  std::vector<std::string> endpoints_;
  size_t at_ = 0;
};

}  // namespace dueq
