#include "broker/store/cluster_router.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

namespace dueq::broker {

namespace {
constexpr size_t kNoNode = std::numeric_limits<size_t>::max();
constexpr int kMaxRedirects = 16;

bool is(const Command& command, std::string_view name) { return !command.args().empty() && command.args()[0] == name; }
bool is_script(const Command& command) { return is(command, "EVALSHA") || is(command, "EVAL"); }
}  // namespace

Result<std::unique_ptr<ClusterRouter>> ClusterRouter::connect(const RedisAddress& address, int timeout_ms,
                                                              NodeSetup setup) {
  std::unique_ptr<ClusterRouter> router(new ClusterRouter(address, timeout_ms, std::move(setup)));
  std::string failures;
  std::optional<std::vector<SlotRange>> ranges;
  for (const auto& seed : address.cluster_seeds) {
    RedisAddress at = address;
    at.cluster_seeds.clear();
    at.host = seed.host;
    at.port = seed.port;
    const std::string where = seed.host + ":" + std::to_string(seed.port);
    auto conn = RedisConnection::connect_to(at, timeout_ms);
    if (!conn) {
      failures += "; " + where + ": " + conn.error().message;
      continue;
    }
    auto reply = conn->run(Command{"CLUSTER", "SLOTS"});
    if (!reply) {
      failures += "; " + where + ": " + reply.error().message;
      continue;
    }
    auto parsed = parse_cluster_slots(reply->get(), seed);
    if (!parsed) {
      failures += "; " + where + ": " + (reply_error(reply->get()).empty() ? parsed.error().message
                                                                          : std::string(reply_error(reply->get())));
      continue;
    }
    ranges = std::move(*parsed);
    break;
  }
  if (!ranges) return dueq::fail(Errc::unavailable, "no cluster node gave the slot map" + failures);
  router->slot_node_.fill(kNoNode);
  for (const auto& range : *ranges) {
    auto node = router->node_at(range.master);
    if (!node) return std::unexpected(node.error());
    std::fill(router->slot_node_.begin() + range.first, router->slot_node_.begin() + range.last + 1, *node);
  }
  const auto uncovered = std::count(router->slot_node_.begin(), router->slot_node_.end(), kNoNode);
  if (uncovered > 0)
    return dueq::fail(Errc::unavailable, std::to_string(uncovered) + " slots have no master (a fail-over under way?)");
  return router;
}

Result<size_t> ClusterRouter::node_at(const HostPort& at) {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i]->at.host == at.host && nodes_[i]->at.port == at.port) return i;
  RedisAddress address = address_;
  address.cluster_seeds.clear();
  address.host = at.host;
  address.port = at.port;
  auto conn = RedisConnection::connect_to(address, timeout_ms_);
  if (!conn) return std::unexpected(conn.error());
  if (setup_)
    if (auto ok = setup_(*conn); !ok) return std::unexpected(ok.error());
  nodes_.push_back(std::make_unique<Node>(Node{at, std::move(*conn)}));
  return nodes_.size() - 1;
}

std::optional<size_t> ClusterRouter::route(const std::vector<Command>& commands, size_t i) const {
  const Command& command = commands[i];
  const auto& args = command.args();
  if (is(command, "WAIT")) return std::nullopt;
  if (is_script(command)) return args.size() > 3 && args[2] != "0" ? node_of_key(args[3]) : 0;
  if (is(command, "MULTI")) return i + 1 < commands.size() ? route(commands, i + 1).value_or(0) : 0;
  if (is(command, "EXEC") || is(command, "DISCARD")) return i > 0 ? route(commands, i - 1).value_or(0) : 0;
  for (const char* keyless : {"PING", "ROLE", "CONFIG", "INFO", "SCRIPT", "SELECT", "AUTH", "CLUSTER", "TIME"})
    if (is(command, keyless)) return 0;
  return args.size() > 1 ? node_of_key(args[1]) : 0;
}

Result<void> ClusterRouter::send(const std::vector<Command>& commands) {
  if (broken_) return dueq::fail(Errc::unavailable, "Redis Cluster connection is broken");
  Batch batch{commands, {}, std::nullopt};
  auto part_of = [&](size_t node) -> Part& {
    for (auto& part : batch.parts)
      if (part.node == node) return part;
    batch.parts.push_back(Part{node, {}});
    return batch.parts.back();
  };
  for (size_t i = 0; i < commands.size(); ++i) {
    if (auto node = route(commands, i)) {
      part_of(*node).indexes.push_back(i);
      continue;
    }
    // WAIT: on every master written to so far in this batch; alone (after
    // writes of earlier batches: the admin thread's), on every master, each
    // of which counts the replicas that have this connection's writes.
    if (batch.parts.empty())
      for (size_t node = 0; node < nodes_.size(); ++node) part_of(node);
    for (auto& part : batch.parts) part.indexes.push_back(i);
  }
  for (const auto& part : batch.parts) {
    std::vector<Command> share;
    share.reserve(part.indexes.size());
    for (size_t i : part.indexes) share.push_back(commands[i]);
    if (auto ok = nodes_[part.node]->connection.send(share); !ok) return fail(ok.error());
  }
  sent_.push_back(std::move(batch));
  return {};
}

Result<std::vector<ReplyPtr>> ClusterRouter::read(Batch& batch) {
  if (batch.replies) return std::move(*std::exchange(batch.replies, std::nullopt));
  std::vector<ReplyPtr> out(batch.commands.size());
  for (const auto& part : batch.parts) {
    auto replies = nodes_[part.node]->connection.receive(part.indexes.size());
    if (!replies) {
      broken_ = true;
      return std::unexpected(replies.error());
    }
    for (size_t k = 0; k < part.indexes.size(); ++k) {
      ReplyPtr& slot = out[part.indexes[k]];
      ReplyPtr& reply = (*replies)[k];
      // WAIT from several masters: the fewest replicas reached (or an error) stands.
      const bool keep = !slot || reply->type == REDIS_REPLY_ERROR ||
                        (slot->type == REDIS_REPLY_INTEGER && reply->type == REDIS_REPLY_INTEGER && reply->integer < slot->integer);
      if (keep) slot = std::move(reply);
    }
  }
  return out;
}

Result<std::vector<ReplyPtr>> ClusterRouter::receive(size_t count) {
  if (broken_) return dueq::fail(Errc::unavailable, "Redis Cluster connection is broken");
  if (sent_.empty() || sent_.front().commands.size() != count)
    return dueq::fail(Errc::internal, "cluster receive does not match the oldest batch sent");
  auto replies = read(sent_.front());
  if (!replies) return replies;
  const bool redirected = std::any_of(replies->begin(), replies->end(), [](const ReplyPtr& r) {
    return parse_redirect(reply_error(r.get())).has_value();
  });
  if (redirected) {
    // Batches sent later are on the wire: read before anything is resent.
    for (size_t b = 1; b < sent_.size(); ++b)
      if (!sent_[b].replies) {
        auto later = read(sent_[b]);
        if (!later) return later;
        sent_[b].replies = std::move(*later);
      }
    if (auto ok = follow_redirects(sent_.front(), *replies); !ok) return std::unexpected(ok.error());
  }
  sent_.pop_front();
  return replies;
}

Result<void> ClusterRouter::follow_redirects(Batch& batch, std::vector<ReplyPtr>& replies) {
  std::set<size_t> resent_to;
  for (size_t i = 0; i < replies.size(); ++i) {
    const Command& command = batch.commands[i];
    for (int tries = 0; tries < kMaxRedirects; ++tries) {
      const auto redirect = parse_redirect(reply_error(replies[i].get()));
      // A script is not sent on to the master its slot is moving to: the
      // keys it builds may still be on this one (lua/lib/fence.lua). Its
      // ASK answer stands, and the call is tried again once the slot moved.
      if (!redirect || (redirect->ask && is_script(command))) break;
      auto to = node_at(redirect->to);
      if (!to) return fail(to.error());
      std::vector<Command> again;
      if (redirect->ask) again.push_back(Command{"ASKING"});
      else slot_node_[redirect->slot] = *to;
      again.push_back(command);
      auto answer = nodes_[*to]->connection.pipeline(again);
      if (!answer) return fail(answer.error());
      replies[i] = std::move(answer->back());
      resent_to.insert(*to);
    }
  }
  // A WAIT of this batch counted replicas on the masters it was sent to:
  // commands resent elsewhere are waited for there too.
  for (size_t i = 0; i < replies.size(); ++i) {
    if (!is(batch.commands[i], "WAIT") || resent_to.empty()) continue;
    for (size_t node : resent_to) {
      auto answer = nodes_[node]->connection.pipeline({batch.commands[i]});
      if (!answer) return fail(answer.error());
      ReplyPtr& reply = answer->front();
      if (reply->type == REDIS_REPLY_ERROR || (replies[i]->type == REDIS_REPLY_INTEGER && reply->type == REDIS_REPLY_INTEGER &&
                                               reply->integer < replies[i]->integer))
        replies[i] = std::move(reply);
    }
  }
  return {};
}

int ClusterRouter::fd() const {
  if (sent_.empty() || sent_.front().parts.empty()) return nodes_.front()->connection.fd();
  return nodes_[sent_.front().parts.front().node]->connection.fd();
}

bool ClusterRouter::has_buffered_input() const {
  if (sent_.empty()) return false;
  const Batch& oldest = sent_.front();
  return oldest.replies.has_value() ||
         (!oldest.parts.empty() && nodes_[oldest.parts.front().node]->connection.has_buffered_input());
}

Result<void> ClusterRouter::each_server(const std::function<Result<void>(RedisConnection&)>& setup) {
  for (auto& node : nodes_)
    if (auto ok = setup(node->connection); !ok) return fail(ok.error());
  return {};
}

}  // namespace dueq::broker
