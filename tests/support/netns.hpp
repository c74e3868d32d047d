#pragma once
// Another host for one test: a network namespace joined to this one by a
// veth pair on a /30 of its own. Processes started through exec_prefix()
// see only that link and their own loopback: this machine's loopback
// services (Redis) are out of their reach. Needs root and `ip netns`;
// available() says why not where they are missing. Removed with the fixture.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace dueq::testing {

class NetNamespace {
 public:
  NetNamespace() {
    const int n = static_cast<int>(::getpid() % 250) + 1;
    name_ = "dueq-host-" + std::to_string(::getpid());
    outer_ = "dq" + std::to_string(::getpid()) + "o";
    inner_ = "dq" + std::to_string(::getpid()) + "i";
    host_ip_ = "10.231." + std::to_string(n) + ".1";
    guest_ip_ = "10.231." + std::to_string(n) + ".2";
    if (::geteuid() != 0) {
      why_not_ = "network namespaces need root";
      return;
    }
    const std::vector<std::string> steps = {
        "ip netns add " + name_,
        "ip link add " + outer_ + " type veth peer name " + inner_,
        "ip link set " + inner_ + " netns " + name_,
        "ip addr add " + host_ip_ + "/30 dev " + outer_,
        "ip link set " + outer_ + " up",
        "ip netns exec " + name_ + " ip addr add " + guest_ip_ + "/30 dev " + inner_,
        "ip netns exec " + name_ + " ip link set " + inner_ + " up",
        "ip netns exec " + name_ + " ip link set lo up",
    };
    for (const auto& step : steps) {
      if (std::system((step + " 2>/dev/null").c_str()) != 0) {
        why_not_ = "'" + step + "' failed: this machine does not allow network namespaces";
        return;
      }
    }
  }
  ~NetNamespace() {
    (void)!std::system(("ip link del " + outer_ + " 2>/dev/null").c_str());
    (void)!std::system(("ip netns del " + name_ + " 2>/dev/null").c_str());
  }
  NetNamespace(const NetNamespace&) = delete;
  NetNamespace& operator=(const NetNamespace&) = delete;

  bool available() const { return why_not_.empty(); }
  const std::string& why_not() const { return why_not_; }
  // This machine's address on the link, as the namespace reaches it.
  const std::string& host_ip() const { return host_ip_; }
  // Prepended to a command line to run it inside the namespace.
  std::vector<std::string> exec_prefix() const { return {"ip", "netns", "exec", name_}; }
  // Runs a shell command inside the namespace; its exit status.
  int run(const std::string& command) const {
    const int status = std::system(("ip netns exec " + name_ + " bash -c '" + command + "' >/dev/null 2>&1").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  std::string name_, outer_, inner_, host_ip_, guest_ip_;
  std::string why_not_;
};

}  // namespace dueq::testing
