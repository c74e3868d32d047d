#pragma once
// The nemesis topology, all real processes, each in its own namespace on
// the run's bridge: a Redis master with two replicas (AOF, appendfsync
// always) and three sentinels watching them, two brokers given the
// sentinels (leader and standby, `min_replicas = 2`), and workers given both
// brokers: dueq-example-workers and one Python worker. Nodes are started,
// signalled, killed and started again by name; a worker that dies by itself
// (a poison job) is started again by tend(). A broker's connections to Redis
// and a worker's to the brokers pass through a proxy in the node's namespace
// (LinkProxy), which the slow and hold faults steer.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/nemesis/history.hpp"
#include "tests/nemesis/network.hpp"
#include "tests/nemesis/schedule.hpp"
#include "tests/support/link_proxy.hpp"
#include "tests/support/process.hpp"

namespace dueq::nemesis {

struct Topology {
  int cpp_workers = 2;
  bool python_worker = true;
  std::string queue = "nemesis";
  // A schedule's (workload.hpp), served by a worker of their own, the
  // last one, which the schedule stops while no worker is to serve them.
  std::vector<std::string> new_queues;
  std::string bin_dir;     // dueq-broker, dueq-example-worker
  std::string source_dir;  // for the Python package and its record worker
  std::string broker_bin;  // "" for bin_dir's dueq-broker (--broker-bin: another build's)
  std::vector<std::string> broker_config;  // lines added to the brokers' TOML
  bool plain_url = false;  // brokers given redis://redis0 instead of the sentinels
  // One broker on its embedded store (its own redis-server, "store0") and
  // the workers: no Redis nodes, no sentinels, no standby.
  bool embedded = false;
  // Six Redis nodes as a Redis Cluster of three masters with a replica
  // each (no sentinels), brokers given redis+cluster:// and min_replicas 1.
  bool cluster = false;

  // `<queue>-ordered`, set `ordered = true` (docs/keys.md), served by the
  // C++ workers; none for another build's broker (it may not know the key).
  std::string ordered_queue() const { return broker_bin.empty() ? queue + "-ordered" : std::string(); }
  // `<queue>-fair`, set `fair = true` with a rate limit per key (docs/keys.md),
  // served by the C++ workers; none for another build's broker.
  std::string fair_queue() const { return broker_bin.empty() ? queue + "-fair" : std::string(); }
  // `<queue>-flows`, where flows and batches go (docs/flows.md), served by
  // the C++ workers; none for another build's broker.
  std::string flow_queue() const { return broker_bin.empty() ? queue + "-flows" : std::string(); }

  // queue, the transient one, the ordered one, the fair one, the flows one, then new_queues.
  std::vector<std::string> queues() const;
};

class Deployment {
 public:
  Deployment(Network& net, std::filesystem::path dir, Topology topology);
  ~Deployment();

  // Adds every node to the network and starts it; false (and why) when a
  // node could not be made.
  bool start_all(std::string& why);

  // Stops every process (an embedded store's redis-server too, by its
  // pid); the run's directory may go once this returns.
  void stop_all();

  const Nodes& nodes() const { return nodes_; }
  // Both brokers, as producers and workers are given them.
  std::string broker_endpoints() const;

  void signal(const std::string& node, int signo);
  // SIGKILL; the node stays down until start().
  void kill(const std::string& node);
  // SIGTERM, and waits for it to exit; the node stays down until start().
  void stop(const std::string& node);
  void start(const std::string& node);
  bool is_down(const std::string& node) const;

  // Steps a broker's wall clock to `shift_ms` from the host's (0: back to
  // it): brokers run with clock_shift.cpp preloaded.
  void shift_clock(const std::string& broker, int64_t shift_ms);

  // A node's links (Nodes::linked) run through a LinkProxy in its
  // namespace: slowed (0, 0, 0 heals them), or its bytes held in them
  // until released (with a marker: from the first bytes that carry it on).
  // heal_links() undoes both on every node.
  void slow_links(const std::string& node, int64_t delay_ms, int64_t jitter_ms, int loss_permille);
  void hold_links(const std::string& node, bool held, const std::string& marker = "");
  void heal_links();

  // Fills the data directory of a Redis node or an embedded store (each a
  // tmpfs of its own, mounted by start_all) with a file that takes every
  // free byte; empty_disk() removes it and starts the node again if it
  // exited meanwhile (Redis exits when it cannot write its AOF under
  // appendfsync always; an embedded store is started again by its broker).
  void fill_disk(const std::string& node);
  // Whether the node's data directory is a tmpfs of the run's own (where
  // mounting is not allowed, fill_disk() does nothing).
  bool has_disk(const std::string& node) const;
  void empty_disk(const std::string& node);

  // The master the sentinels name (the first that answers); "" when none
  // does. Behind a Redis Cluster: a node that answers (cli() follows its
  // redirects to the master of each key).
  std::string master() const;
  // The broker that holds the leader lease on that master, as the lease
  // says; "" when none does.
  std::string leader() const;
  // Every sentinel knows the other two and both replicas: a fail-over can
  // be agreed on.
  bool sentinels_ready() const;
  // Runs redis-cli against a Redis or sentinel node; its output.
  std::string cli(const std::string& node, const std::string& args) const;
  // Until the sentinels name a master that says it is one (a demotion
  // leaves none until they repair it); asks for a fail-over after 20 s.
  // Behind a Redis Cluster: until a node says every slot is served.
  bool ensure_master();
  // A fail-over: SENTINEL FAILOVER, or behind a Redis Cluster CLUSTER
  // FAILOVER on a replica.
  void fail_over();
  // Under a plain URL: switches the master over to `to` (writes paused
  // until `to` has every one, so none is lost), makes every other node its
  // replica, the old master under its open connections but cut off from
  // `to` (it does not follow it), and points the brokers' address at `to`
  // for the connections they open from now on. Moving back to the first
  // master heals its link first. false when `to` did not catch up (nothing
  // is changed then).
  bool move_master(const std::string& to);

  // Starts again any worker that exited by itself; each is a "poison"
  // fault in the history.
  void tend();

  int64_t broker_peak_rss_kb();
  int64_t redis_peak_bytes() const;

 private:
  struct Node {
    std::function<std::vector<std::string>()> command;
    std::vector<std::string> env;
    std::unique_ptr<testing::Process> process;
    bool down = false;
  };
  void add(const std::string& name, std::vector<std::string>& group, std::function<std::vector<std::string>()> command,
           std::vector<std::string> env = {});
  // Sends `signo` to a node's process and waits for it to exit; the node
  // stays down until start().
  void take_down(const std::string& node, int signo);
  std::vector<std::string> redis_command(const std::string& name);
  std::vector<std::string> sentinel_command(const std::string& name);
  void note_rss(const std::string& node);
  bool is_store(const std::string& node) const;
  std::filesystem::path store_dir() const { return dir_ / "broker0-data"; }
  // A Redis Cluster made of the Redis nodes once they all answer.
  bool create_cluster(std::string& why);
  // A Redis node that answers PING now ("" when none does).
  std::string live_redis() const;
  // The embedded store's redis-server pid as its pid file says, if that
  // process lives; -1 otherwise.
  int live_store_pid() const;

  bool add_proxies(std::string& why);
  void mount_disks();
  std::filesystem::path data_dir(const std::string& node) const;

  Network& net_;
  std::map<std::string, std::unique_ptr<testing::LinkProxy>> proxies_;
  std::vector<std::filesystem::path> disks_;  // tmpfs mounts, unmounted by stop_all
  std::filesystem::path dir_;
  Topology topology_;
  Nodes nodes_;
  std::map<std::string, Node> nodes_by_name_;
  int64_t broker_peak_rss_kb_ = 0;
  // While an embedded store is held down: kills each redis-server its
  // broker starts, polling its pid file every millisecond, so that most
  // die before they serve (a restart that dies so is the case to see).
  std::atomic<bool> store_held_down_{false};
  std::jthread store_killer_;
  bool stopped_ = false;
  // Under a plain URL: the node the brokers' address (redis0's) leads to.
  std::string addressed_;
};

}  // namespace dueq::nemesis
