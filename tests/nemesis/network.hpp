#pragma once
// The nemesis run's network: one Linux bridge on this machine (the "host",
// where producers and the operator run, at .1) and a network namespace per
// node, each joined to the bridge by a veth pair with an address of its own
// on a /24 no other run uses. Partitions are iptables rules inside the
// nodes' namespaces. Needs root and `ip netns`; available() says why not.
// Everything is removed with the object, and the namespaces of runs that
// died without removing theirs are removed by the next run.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dueq::nemesis {

class Network {
 public:
  Network();
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  bool available() const { return why_not_.empty(); }
  const std::string& why_not() const { return why_not_; }

  // Adds a node; false (and why_not()) when the kernel refused.
  bool add(const std::string& node);
  // The node's address; "host" is this machine's end of the bridge.
  std::string ip(const std::string& node) const;
  // Prepended to a command line to run it inside the node's namespace.
  std::vector<std::string> exec_prefix(const std::string& node) const;

  // Inside `node`'s namespace, hands its outgoing TCP connections to `port`
  // to a listener on its loopback `to_port` (a LinkProxy), except those
  // whose packets carry `mark` (the proxy's own onward connections).
  bool redirect(const std::string& node, int port, int to_port, uint32_t mark);
  // Where `node`'s namespace is bound, for setns().
  std::string namespace_path(const std::string& node) const { return "/var/run/netns/" + namespace_of(node); }

  // Drops, inside `node`'s namespace, the packets it sends to `peers`
  // (`outgoing`) and those it receives from them (`incoming`).
  void cut(const std::string& node, const std::vector<std::string>& peers, bool outgoing, bool incoming);
  // Removes every rule cut() added, in every node.
  void heal();

 private:
  static void sweep_leftovers();
  std::string namespace_of(const std::string& node) const { return prefix_ + node; }

  std::string why_not_;
  std::string prefix_;  // of this run's namespaces: dqn<pid>-
  std::string bridge_;
  std::string subnet_;  // 10.233.N.
  std::map<std::string, int> index_;
};

}  // namespace dueq::nemesis
