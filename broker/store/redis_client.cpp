#include "broker/store/redis_client.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <thread>

#include "broker/store/keys.hpp"

namespace dueq::broker {

namespace {
bool is_noscript(const redisReply* reply) { return reply_error(reply).starts_with("NOSCRIPT"); }
bool is_wait(const Command& command) { return !command.args().empty() && command.args().front() == "WAIT"; }
bool is_fenced_reply(const ReplyPtr& reply) { return reply_error(reply.get()).starts_with("ERR dueq fenced"); }

}  // namespace

// The queue's epoch key (from the call's first key: same slot) and the
// epoch, with "c" behind a Redis Cluster: the script then checks that the
// queue's slot is not moving (lua/lib/fence.lua). Outside a Cluster the
// leader's epoch counter follows the queue's key: the script compares the
// sender's epoch with the newest one given, which also fences a deposed
// leader out of a queue no newer leader knew of (one its late call creates).
Command RedisClient::with_fence(Command call) const {
  const auto& args = call.args();
  const std::string key = args.size() > 3 && args[2] != "0" ? epoch_key_of(args[3]) : std::string();
  if (address_.via_cluster()) call.append_fence({key}, std::to_string(epoch_) + "c");
  else call.append_fence({key, kLeaderEpochsKey}, std::to_string(epoch_));
  return call;
}

Result<void> RedisClient::connect() {
  disconnect();
  if (address_.via_cluster()) {
    // Every master gets the scripts when it is first met (a MOVED to a new
    // master included).
    auto router = ClusterRouter::connect(address_, timeout_ms_, [name = name_](RedisConnection& node) { return prepare(node, name); });
    if (!router) return std::unexpected(router.error());
    transport_ = std::move(*router);
    return {};
  }
  auto conn = RedisConnection::connect(address_, timeout_ms_);
  if (!conn) return std::unexpected(conn.error());
  if (auto ok = prepare(*conn, name_); !ok) return ok;
  transport_ = std::make_unique<SingleServer>(std::move(*conn));
  return {};
}

// The scripts loaded and the name given, in one round trip; the name's
// reply (last) is not looked at.
Result<void> RedisClient::prepare(RedisConnection& server, const std::string& name) {
  std::vector<Command> loads;
  loads.reserve(lua::kScripts.size() + 1);
  for (const auto& script : lua::kScripts) loads.push_back(Command{"SCRIPT", "LOAD", script.source});
  if (!name.empty()) loads.push_back(Command{"CLIENT", "SETNAME", name});
  auto replies = server.pipeline(loads);
  if (!replies) return std::unexpected(replies.error());
  for (size_t i = 0; i < lua::kScriptCount; ++i) {
    const redisReply* r = (*replies)[i].get();
    if (r->type != REDIS_REPLY_STRING)
      return fail(Errc::internal, fmt::format("loading script {}: {}", lua::kScripts[i].name, reply_error(r)));
    // Calls are built with the SHA1 computed at build time.
    if (reply::str(r) != lua::kScripts[i].sha1)
      return fail(Errc::internal, fmt::format("loading script {}: Redis named it {}, the build {}", lua::kScripts[i].name,
                                              reply::str(r), lua::kScripts[i].sha1));
  }
  return {};
}

Result<void> RedisClient::send(Round& round) {
  if (!connected()) return fail(Errc::unavailable, "not connected to Redis");
  OutstandingRound sent{round.take_commands(), std::nullopt};
  for (auto& call : sent.commands) call = with_fence(std::move(call));
  if (auto ok = transport_->send(sent.commands); !ok) {
    disconnect();
    return ok;
  }
  if (counted_in_) counted_in_->count_loop_commands(sent.commands.size());
  outstanding_.push_back(std::move(sent));
  return {};
}

Result<std::vector<ReplyPtr>> RedisClient::receive() {
  if (!connected()) return fail(Errc::unavailable, "not connected to Redis");
  if (outstanding_.empty()) return fail(Errc::internal, "no round is waiting for replies");
  auto& oldest = outstanding_.front();
  if (!oldest.replies) {
    auto replies = transport_->receive(oldest.commands.size());
    if (!replies) {
      disconnect();
      return replies;
    }
    oldest.replies = std::move(*replies);
  }
  if (std::any_of(oldest.replies->begin(), oldest.replies->end(), [](const ReplyPtr& r) { return is_noscript(r.get()); }))
    if (auto ok = recover_lost_scripts(); !ok) {
      disconnect();
      return std::unexpected(ok.error());
    }
  // READONLY, under any URL, means this server is no longer a master (a
  // fail-over, a REPLICAOF): the round is failed like a lost connection
  // (nothing of it counts as applied), and the next connect checks ROLE
  // again (behind sentinels, asks them for the master first).
  if (std::any_of(oldest.replies->begin(), oldest.replies->end(),
                  [](const ReplyPtr& r) { return reply_error(r.get()).starts_with("READONLY"); })) {
    disconnect();
    return fail(Errc::not_master, "Redis answered READONLY: the master became a replica; reconnecting");
  }
  if (std::any_of(oldest.replies->begin(), oldest.replies->end(), is_fenced_reply)) {
    fenced_ = true;
    disconnect();
    return fail(Errc::fenced, "Redis refused a write: a newer leader took over (leader epoch " + std::to_string(epoch_) +
                                  " deposed)");
  }
  auto out = std::move(*outstanding_.front().replies);
  outstanding_.pop_front();
  return out;
}

Result<void> RedisClient::recover_lost_scripts() {
  // Rounds sent later are already on the wire: read them before anything new.
  for (auto& round : outstanding_)
    if (!round.replies) {
      auto replies = transport_->receive(round.commands.size());
      if (!replies) return std::unexpected(replies.error());
      round.replies = std::move(*replies);
    }
  if (auto ok = transport_->each_server([](RedisConnection& server) { return prepare(server, {}); }); !ok) return ok;
  for (auto& round : outstanding_) {
    std::vector<size_t> lost;
    for (size_t i = 0; i < round.replies->size(); ++i) {
      // A WAIT that ran before a call resent now counted replicas without
      // that call's writes: it is sent again, after them.
      if (is_noscript((*round.replies)[i].get()) || (!lost.empty() && is_wait(round.commands[i]))) lost.push_back(i);
    }
    if (lost.empty()) continue;
    std::vector<Command> again;
    again.reserve(lost.size());
    for (size_t i : lost) again.push_back(round.commands[i]);
    auto retried = transport_->pipeline(again);
    if (!retried) return std::unexpected(retried.error());
    for (size_t j = 0; j < lost.size(); ++j) (*round.replies)[lost[j]] = std::move((*retried)[j]);
  }
  return {};
}

Result<void> RedisClient::execute(Round& round) {
  if (!outstanding_.empty()) return fail(Errc::internal, "execute while pipelined rounds are outstanding");
  if (stop_ != nullptr && stop_->load()) {
    round.fail();
    return fail(Errc::unavailable, "the broker is stopping");
  }
  auto replies = [&]() -> Result<std::vector<ReplyPtr>> {
    const RedisBudget::Turn turn(budget_.get());  // over before the continuations run
    auto sent = send(round);
    if (!sent) return std::unexpected(sent.error());
    return receive();
  }();
  if (!replies) {
    round.fail();
    return std::unexpected(replies.error());
  }
  round.apply(*replies);
  return {};
}

Result<std::vector<ReplyPtr>> RedisClient::pipeline(std::vector<Command> commands) {
  if (!outstanding_.empty()) return fail(Errc::internal, "pipeline while rounds are outstanding");
  if (stop_ != nullptr && stop_->load()) return fail(Errc::unavailable, "the broker is stopping");
  const RedisBudget::Turn turn(budget_.get());
  const bool ask_role = reads_from_master_only_ && !in_cluster();
  Round round;
  if (ask_role) round.add(Command{"ROLE"});
  for (auto& command : commands) round.add(std::move(command));
  if (auto ok = send(round); !ok) return std::unexpected(ok.error());
  auto replies = receive();
  if (!replies || !ask_role) return replies;
  if (const auto role = role_of(replies->front().get()); role != "master") {
    disconnect();
    return fail(Errc::not_master, "the Redis server this connection holds is now a " + std::string(role) +
                                      " (a master demoted under it), whose reads may lack the newest writes: reconnecting");
  }
  replies->erase(replies->begin());
  return replies;
}

Result<ReplyPtr> RedisClient::call(Command command) {
  std::vector<Command> one;
  one.push_back(std::move(command));
  auto replies = pipeline(std::move(one));
  if (!replies) return std::unexpected(replies.error());
  return std::move(replies->front());
}

}  // namespace dueq::broker
