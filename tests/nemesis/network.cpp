#include "tests/nemesis/network.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdlib>
#include <regex>
#include <sstream>

#include "tests/support/redis_server.hpp"

namespace dueq::nemesis {

namespace {

bool run(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

bool alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

}  // namespace

// Namespaces dqn<pid>-<node> and bridges dqb<pid> whose run is gone.
void Network::sweep_leftovers() {
  std::istringstream spaces(testing::command_output("ip netns list 2>/dev/null"));
  const std::regex space("^dqn([0-9]+)-(\\S+)");
  for (std::string line; std::getline(spaces, line);)
    if (std::smatch m; std::regex_search(line, m, space) && !alive(std::stoi(m[1]))) run("ip netns del " + m[0].str());
  std::istringstream links(testing::command_output("ip -o link show type bridge 2>/dev/null"));
  const std::regex bridge(": (dqb([0-9]+)):");
  for (std::string line; std::getline(links, line);)
    if (std::smatch m; std::regex_search(line, m, bridge) && !alive(std::stoi(m[2]))) run("ip link del " + m[1].str());
}

Network::Network() {
  if (::geteuid() != 0) {
    why_not_ = "network namespaces need root";
    return;
  }
  if (!run("command -v iptables") || !run("command -v ip")) {
    why_not_ = "iptables and ip (iproute2) are needed: make deps installs them";
    return;
  }
  // Runs at once (ctest -j) take different subnets: chosen under a lock.
  const int lock = ::open("/tmp/dueq-nemesis-net.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  ::flock(lock, LOCK_EX);
  sweep_leftovers();
  const std::string pid = std::to_string(::getpid());
  prefix_ = "dqn" + pid + "-";
  bridge_ = "dqb" + pid;
  const std::string in_use = testing::command_output("ip -o -4 addr show 2>/dev/null");
  for (int n = static_cast<int>(::getpid() % 200) + 1, tries = 0; tries < 200; ++tries, n = n % 200 + 1) {
    if (in_use.find(fmt::format("10.233.{}.", n)) == std::string::npos) {
      subnet_ = fmt::format("10.233.{}.", n);
      break;
    }
  }
  const bool made = !subnet_.empty() && run("ip link add " + bridge_ + " type bridge") &&
                    run("ip addr add " + subnet_ + "1/24 dev " + bridge_) && run("ip link set " + bridge_ + " up");
  ::flock(lock, LOCK_UN);
  ::close(lock);
  if (!made) why_not_ = "could not make a bridge (ip link add type bridge): this machine does not allow it";
}

Network::~Network() {
  for (const auto& [node, index] : index_) run("ip netns del " + namespace_of(node));
  if (!bridge_.empty()) run("ip link del " + bridge_);
}

bool Network::add(const std::string& node) {
  const int index = static_cast<int>(index_.size());
  const std::string outer = fmt::format("dq{}v{}", ::getpid(), index), inner = fmt::format("dq{}p{}", ::getpid(), index);
  const std::string ns = namespace_of(node);
  const std::string address = subnet_ + std::to_string(10 + index);
  for (const auto& step : {"ip netns add " + ns, fmt::format("ip link add {} type veth peer name {}", outer, inner),
                           fmt::format("ip link set {} netns {}", inner, ns), fmt::format("ip link set {} master {}", outer, bridge_),
                           fmt::format("ip link set {} up", outer),
                           fmt::format("ip netns exec {} ip addr add {}/24 dev {}", ns, address, inner),
                           fmt::format("ip netns exec {} ip link set {} up", ns, inner),
                           fmt::format("ip netns exec {} ip link set lo up", ns)}) {
    if (!run(step)) {
      why_not_ = "'" + step + "' failed";
      return false;
    }
  }
  index_[node] = index;
  return true;
}

std::string Network::ip(const std::string& node) const {
  if (node == "host") return subnet_ + "1";
  return subnet_ + std::to_string(10 + index_.at(node));
}

std::vector<std::string> Network::exec_prefix(const std::string& node) const {
  return {"ip", "netns", "exec", namespace_of(node)};
}

bool Network::redirect(const std::string& node, int port, int to_port, uint32_t mark) {
  // In the nat table, which heal() leaves alone.
  return run(fmt::format("ip netns exec {} iptables -w -t nat -A OUTPUT -p tcp --dport {} -m mark ! --mark {:#x} -j REDIRECT "
                         "--to-ports {}",
                         namespace_of(node), port, mark, to_port));
}

void Network::cut(const std::string& node, const std::vector<std::string>& peers, bool outgoing, bool incoming) {
  const std::string in_ns = "ip netns exec " + namespace_of(node) + " iptables -w -A ";
  for (const auto& peer : peers) {
    if (outgoing) run(in_ns + "OUTPUT -d " + ip(peer) + " -j DROP");
    if (incoming) run(in_ns + "INPUT -s " + ip(peer) + " -j DROP");
  }
}

void Network::heal() {
  for (const auto& [node, index] : index_) run("ip netns exec " + namespace_of(node) + " iptables -w -F");
}

}  // namespace dueq::nemesis
