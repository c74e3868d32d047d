#pragma once
// A Redis Cluster on loopback for tests and the bench: `masters` masters,
// each with `replicas_each` replicas (made with redis-cli --cluster create),
// or masters alone, one or more (slots assigned by hand); node timeout 1 s,
// so that a killed master's replica is promoted within seconds.
#include <fmt/format.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "broker/store/redis_connection.hpp"
#include "tests/support/redis_server.hpp"

namespace dueq::testing {

class RedisCluster {
 public:
  RedisCluster(int masters, int replicas_each) {
    std::string hosts;
    for (int i = 0; i < masters * (1 + replicas_each); ++i) {
      nodes_.push_back(std::make_unique<RedisServer>(std::vector<std::string>{
          "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"},
          free_cluster_port()));
      hosts += " 127.0.0.1:" + std::to_string(nodes_.back()->port());
    }
    if (replicas_each == 0) {
      // By hand: redis-cli --cluster create wants three masters at least.
      for (int i = 0; i < masters; ++i) {
        const int first = 16'384 * i / masters, last = 16'384 * (i + 1) / masters - 1;
        nodes_[static_cast<size_t>(i)]->cli(fmt::format("CLUSTER ADDSLOTSRANGE {} {}", first, last));
        if (i > 0) nodes_[static_cast<size_t>(i)]->cli(fmt::format("CLUSTER MEET 127.0.0.1 {}", nodes_[0]->port()));
      }
    } else {
      const std::string created = command_output("redis-cli --cluster create" + hosts + " --cluster-replicas " +
                                                 std::to_string(replicas_each) + " --cluster-yes 2>&1");
      if (created.find("[OK] All 16384 slots covered") == std::string::npos)
        throw std::runtime_error("redis-cli --cluster create failed: " + created);
    }
    for (auto& node : nodes_)
      for (int i = 0; i < 500 && node->cli("CLUSTER INFO").find("cluster_state:ok") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  // redis+cluster:// with every node as a seed.
  std::string url() const {
    std::string out = "redis+cluster://";
    for (size_t i = 0; i < nodes_.size(); ++i) out += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(nodes_[i]->port());
    return out;
  }

  size_t size() const { return nodes_.size(); }

  // Moves `slot` to master `to` the way redis-cli --cluster reshard does:
  // IMPORTING on the target, MIGRATING on the source, the keys in batches
  // of `batch` (pausing `pause` between batches, so that commands meet the
  // slot half-moved), then the new owner told to every master.
  void move_slot(int slot, RedisServer& to, int batch = 10, std::chrono::milliseconds pause = std::chrono::milliseconds(2)) {
    RedisServer* from = nullptr;
    for (auto& node : nodes_)
      if (owns(*node, slot)) from = node.get();
    if (from == nullptr || from == &to) throw std::runtime_error("move_slot: no other master serves the slot");
    const std::string from_id = from->cli("CLUSTER MYID"), to_id = to.cli("CLUSTER MYID");
    to.cli(fmt::format("CLUSTER SETSLOT {} IMPORTING {}", slot, from_id));
    from->cli(fmt::format("CLUSTER SETSLOT {} MIGRATING {}", slot, to_id));
    // One connection for the whole move: a redis-cli per batch made the
    // move of a busy queue's slot (5,768 keys) take 16 s.
    RedisAddress address;
    address.host = "127.0.0.1";
    address.port = from->port();
    auto connection = broker::RedisConnection::connect_to(address, 5'000);
    if (!connection) throw std::runtime_error("move_slot: " + connection.error().message);
    while (true) {
      auto keys = connection->run(broker::Command{"CLUSTER", "GETKEYSINSLOT"}.add(slot).add(batch));
      if (!keys || (*keys)->type != REDIS_REPLY_ARRAY) throw std::runtime_error("move_slot: CLUSTER GETKEYSINSLOT failed");
      if ((*keys)->elements == 0) break;
      broker::Command migrate{"MIGRATE", "127.0.0.1"};
      migrate.add(to.port()).add("").add(int64_t{0}).add(int64_t{5'000}).add("KEYS");
      for (size_t i = 0; i < (*keys)->elements; ++i) migrate.add(std::string_view((*keys)->element[i]->str, (*keys)->element[i]->len));
      auto moved = connection->run(migrate);
      if (!moved || (*moved)->type != REDIS_REPLY_STATUS)
        throw std::runtime_error("MIGRATE: " + (moved ? std::string((*moved)->str, (*moved)->len) : moved.error().message));
      std::this_thread::sleep_for(pause);
    }
    // The new owner first, then the old one, then the rest (as redis-cli does).
    to.cli(fmt::format("CLUSTER SETSLOT {} NODE {}", slot, to_id));
    from->cli(fmt::format("CLUSTER SETSLOT {} NODE {}", slot, to_id));
    for (auto& node : nodes_)
      if (node.get() != &to && node.get() != from && node->cli("ROLE").starts_with("master"))
        node->cli(fmt::format("CLUSTER SETSLOT {} NODE {}", slot, to_id));
  }
  RedisServer& node(size_t i) { return *nodes_.at(i); }
  // The node serving `key`'s slot as master now.
  RedisServer& master_of(const std::string& key) {
    const std::string slot = nodes_.front()->cli("CLUSTER KEYSLOT '" + key + "'");
    for (auto& node : nodes_) {
      if (node->cli("ROLE").rfind("master", 0) != 0) continue;
      if (owns(*node, std::stoi(slot))) return *node;
    }
    throw std::runtime_error("no master serves slot " + slot);
  }

 private:
  static bool owns(RedisServer& node, int slot) {
    // "CLUSTER NODES": the line with "myself" lists its slot ranges last.
    const std::string nodes = node.cli("CLUSTER NODES");
    std::istringstream lines(nodes);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.find("myself") == std::string::npos) continue;
      std::istringstream fields(line);
      std::string field;
      for (int i = 0; i < 8 && fields >> field; ++i) {
      }
      while (fields >> field) {
        if (field.starts_with("[")) continue;  // a slot being moved
        const auto dash = field.find('-');
        const int first = std::stoi(field.substr(0, dash));
        const int last = dash == std::string::npos ? first : std::stoi(field.substr(dash + 1));
        if (slot >= first && slot <= last) return true;
      }
    }
    return false;
  }

  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace dueq::testing
