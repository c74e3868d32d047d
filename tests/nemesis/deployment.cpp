#include "tests/nemesis/deployment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/redis_server.hpp"

namespace dueq::nemesis {

namespace {

constexpr const char* kMasterName = "mymaster";
constexpr int kBrokerPort = 5555;
constexpr int kRedisPort = 6379;
// A link proxy listens on its node's loopback on this port; its onward
// connections carry the mark that the REDIRECT rule lets by.
constexpr int kProxyPort = 16379;
constexpr uint32_t kProxyMark = 0x44;
// Each store's data directory is a tmpfs of this size, named dqdisk<pid>
// (so that a later run unmounts those of runs that died).
constexpr const char* kDiskSize = "512m";

bool run_quietly(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

void unmount_disks_of_dead_runs() {
  std::ifstream mounts("/proc/mounts");
  for (std::string source, target, rest; mounts >> source >> target && std::getline(mounts, rest);) {
    if (!source.starts_with("dqdisk")) continue;
    const int pid = std::atoi(source.c_str() + 6);
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) run_quietly("umount -l " + target);
  }
}

int64_t status_field_kb(int pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with(field + ":")) return std::stoll(line.substr(field.size() + 1));
  return 0;
}

}  // namespace

std::vector<std::string> Topology::queues() const {
  // The main queue first (wait_settled waits to see it); the transient one
  // an operator deletes now and then may be gone at the end.
  std::vector<std::string> out = {queue, queue + "-transient"};
  if (!ordered_queue().empty()) out.push_back(ordered_queue());
  if (!fair_queue().empty()) out.push_back(fair_queue());
  if (!flow_queue().empty()) out.push_back(flow_queue());
  out.insert(out.end(), new_queues.begin(), new_queues.end());
  return out;
}

Deployment::Deployment(Network& net, std::filesystem::path dir, Topology topology)
    : net_(net), dir_(std::move(dir)), topology_(std::move(topology)) {}

Deployment::~Deployment() { stop_all(); }

void Deployment::stop_all() {
  if (std::exchange(stopped_, true)) return;
  store_killer_ = std::jthread();
  const int store_pid = nodes_.stores.empty() ? -1 : live_store_pid();
  // Workers and brokers first, so that none logs the store going away.
  for (const auto* group : {&nodes_.workers, &nodes_.brokers, &nodes_.sentinels, &nodes_.redis})
    for (const auto& name : *group) nodes_by_name_.at(name).process.reset();
  // An embedded store's redis-server gets SIGTERM when its broker dies and
  // writes its AOF before it exits (it stays up if it cannot: its
  // directory must outlive it). It is not this process's child: waited for
  // by its pid, then killed.
  if (store_pid > 0) {
    const int64_t give_up_ms = steady_ms() + 10'000;
    while (::kill(store_pid, 0) == 0 && steady_ms() < give_up_ms) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (::kill(store_pid, 0) == 0) ::kill(store_pid, SIGKILL);
  }
  for (const auto& disk : disks_) run_quietly("umount -l " + disk.string());
}

std::filesystem::path Deployment::data_dir(const std::string& node) const { return is_store(node) ? store_dir() : dir_ / node; }

void Deployment::mount_disks() {
  unmount_disks_of_dead_runs();
  std::vector<std::string> stores = nodes_.redis;
  stores.insert(stores.end(), nodes_.stores.begin(), nodes_.stores.end());
  for (const auto& node : stores) {
    const auto path = data_dir(node);
    std::filesystem::create_directories(path);
    if (!run_quietly(fmt::format("mount -t tmpfs -o size={} dqdisk{} {}", kDiskSize, ::getpid(), path.string()))) {
      // Filling a directory that is not a tmpfs of the run's own would fill
      // this machine's disk: full-disk faults are then not played.
      fmt::print("nemesis: no full-disk faults here: a tmpfs could not be mounted on {}\n", path.string());
      return;
    }
    disks_.push_back(path);
  }
}

bool Deployment::has_disk(const std::string& node) const {
  return std::find(disks_.begin(), disks_.end(), data_dir(node)) != disks_.end();
}

void Deployment::fill_disk(const std::string& node) {
  if (!has_disk(node)) return;
  const auto path = data_dir(node);
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) != 0) return;
  const int fd = ::open((path / "filler").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!::fallocate(fd, 0, 0, static_cast<off_t>(fs.f_bavail * fs.f_frsize));
  ::close(fd);
}

void Deployment::empty_disk(const std::string& node) {
  std::error_code ec;
  std::filesystem::remove(data_dir(node) / "filler", ec);
  if (is_store(node)) return;
  Node& n = nodes_by_name_.at(node);
  if (!n.down && n.process && !n.process->running()) start(node);
}

void Deployment::add(const std::string& name, std::vector<std::string>& group,
                     std::function<std::vector<std::string>()> command, std::vector<std::string> env) {
  group.push_back(name);
  nodes_by_name_[name] = Node{std::move(command), std::move(env), nullptr, true};
}

std::vector<std::string> Deployment::redis_command(const std::string& name) {
  const auto data = dir_ / name;
  std::filesystem::create_directories(data);
  std::vector<std::string> argv = {"redis-server", "--port", "6379", "--bind", net_.ip(name), "--dir", data.string(),
                                   "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no",
                                   "--maxmemory-policy", "noeviction", "--daemonize", "no",
                                   // As deploy/redis.conf says: no wait before a returning replica's full sync.
                                   "--repl-diskless-sync-delay", "0"};
  if (topology_.cluster) {
    // Its nodes.conf (in its directory) brings it back into the cluster.
    argv.insert(argv.end(), {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"});
    return argv;
  }
  // A node started again follows the master the sentinels name now (its
  // old data, if it was the master before a fail-over, is dropped by the
  // full sync, as it would be in production); the first start follows redis0.
  std::string master = nodes_by_name_.at(nodes_.redis[0]).process ? this->master() : nodes_.redis[0];
  if (master.empty()) master = nodes_.redis[0];
  if (master != name) argv.insert(argv.end(), {"--replicaof", net_.ip(master), "6379"});
  return argv;
}

std::vector<std::string> Deployment::sentinel_command(const std::string& name) {
  const auto config = dir_ / (name + ".conf");
  // Written once: sentinel rewrites it with what it learns, and starts
  // again from it.
  if (!std::filesystem::exists(config))
    std::ofstream(config) << "port 26379\nbind " << net_.ip(name) << "\ndaemonize no\ndir " << dir_.string()
                          << "\nsentinel monitor " << kMasterName << " " << net_.ip(nodes_.redis[0]) << " 6379 2\n"
                          << "sentinel down-after-milliseconds " << kMasterName << " 1000\n"
                          << "sentinel failover-timeout " << kMasterName << " 3000\n"
                          << "sentinel parallel-syncs " << kMasterName << " 1\n";
  return {"redis-sentinel", config.string()};
}

bool Deployment::start_all(std::string& why) {
  nodes_.cluster = topology_.cluster;
  if (topology_.embedded) {
    nodes_.stores = {"store0"};
  } else {
    for (int i = 0; i < (topology_.cluster ? 6 : 3); ++i)
      add(fmt::format("redis{}", i), nodes_.redis, [this, i] { return redis_command(fmt::format("redis{}", i)); });
  }
  // Brokers given the master's own address have no sentinels to follow;
  // none run then, and redis0 stays the master.
  if (!topology_.plain_url && !topology_.embedded && !topology_.cluster)
    for (int i = 0; i < 3; ++i)
      add(fmt::format("sentinel{}", i), nodes_.sentinels, [this, i] { return sentinel_command(fmt::format("sentinel{}", i)); });
  const auto broker_config = dir_ / "broker.toml";
  // Every replica confirms each enqueue: with fewer, a fail-over can promote
  // a replica that had not confirmed it, and the accepted job is gone (the
  // first runs of this suite lost 125 of 3,540 so, with min_replicas = 1).
  {
    std::ofstream config(broker_config);
    // As many as each master has; under a plain URL as many as follow a
    // moved master (the old one is cut off from it: FaultKind::move, which
    // loses no write since it waits for the new master to catch up).
    if (!topology_.embedded)
      config << "min_replicas = " << (topology_.cluster || topology_.plain_url ? 1 : 2) << "\nreplica_timeout = \"500ms\"\n";
    // The workload's periodic entry: ticks enqueued 3 s ahead, longer
    // than a take-over (checker.hpp's Bounds::cron_lookahead_ms).
    config << "cron_lookahead = \"3s\"\n";
    for (const auto& line : topology_.broker_config) config << line << '\n';
    // Finished jobs keep their documents, which the checker holds to their
    // jobs (another build's broker may not know the key: it keeps none).
    if (topology_.broker_bin.empty()) config << "[defaults]\nhistory_retention = \"1h\"\n";
    if (!topology_.ordered_queue().empty()) config << "[queues." << topology_.ordered_queue() << "]\nordered = true\n";
    // Its busy key sends about 13 jobs a second, in pairs: a rate of 16
    // with a burst of 2 parks some now and then, for a fraction of a second.
    if (!topology_.fair_queue().empty())
      config << "[queues." << topology_.fair_queue() << "]\nfair = true\nkey_rate = 16\nkey_rate_burst = 2\n";
  }
  // A broker's wall clock is the host's plus the shift in its file
  // (clock_shift.cpp); ASan is told that its runtime comes after that
  // library in the list.
  const char* asan = std::getenv("ASAN_OPTIONS");
  // The embedded store is one broker's: its data directory is locked.
  for (int i = 0; i < (topology_.embedded ? 1 : 2); ++i) {
    const std::string name = fmt::format("broker{}", i);
    std::ofstream(dir_ / ("clock-" + name)).write("\0\0\0\0\0\0\0\0", 8);
    std::vector<std::string> env = {"LD_PRELOAD=" + topology_.bin_dir + "/libdueq_clock_shift.so",
                                    "DUEQ_CLOCK_SHIFT_FILE=" + (dir_ / ("clock-" + name)).string(),
                                    std::string("ASAN_OPTIONS=") + (asan != nullptr ? asan : "") + ":verify_asan_link_order=0"};
    add(name, nodes_.brokers, [this, name, broker_config] {
      std::string redis = "sentinel://";
      for (size_t s = 0; s < nodes_.sentinels.size(); ++s)
        redis += (s == 0 ? "" : ",") + net_.ip(nodes_.sentinels[s]) + ":26379";
      redis += std::string("/") + kMasterName;
      if (topology_.plain_url) redis = fmt::format("redis://{}:6379", net_.ip(nodes_.redis[0]));
      if (topology_.cluster) {
        redis = "redis+cluster://";
        for (size_t r = 0; r < nodes_.redis.size(); ++r) redis += (r == 0 ? "" : ",") + net_.ip(nodes_.redis[r]) + ":6379";
      }
      const std::string broker = topology_.broker_bin.empty() ? topology_.bin_dir + "/dueq-broker" : topology_.broker_bin;
      const std::vector<std::string> store =
          topology_.embedded ? std::vector<std::string>{"--data-dir", store_dir().string()} : std::vector<std::string>{"--redis", redis};
      return std::vector<std::string>{broker, "--config", broker_config.string(), store[0], store[1], "--listen",
                                      fmt::format("tcp://{}:{}", net_.ip(name), kBrokerPort), "--insecure", "--log-level", "info"};
    }, std::move(env));
  }
  for (int i = 0; i < topology_.cpp_workers; ++i) {
    const std::string name = fmt::format("worker{}", i);
    add(name, nodes_.workers, [this, name] {
      std::vector<std::string> argv = {topology_.bin_dir + "/dueq-example-worker", "--broker", broker_endpoints(), "--concurrency",
                                       "8", "--record", (dir_ / ("starts-" + name + ".txt")).string()};
      argv.insert(argv.end(), {"--queue", topology_.queue, "--queue", topology_.queue + "-transient"});
      if (!topology_.ordered_queue().empty()) argv.insert(argv.end(), {"--queue", topology_.ordered_queue()});
      if (!topology_.fair_queue().empty()) argv.insert(argv.end(), {"--queue", topology_.fair_queue()});
      if (!topology_.flow_queue().empty()) argv.insert(argv.end(), {"--queue", topology_.flow_queue()});
      return argv;
    });
  }
  if (topology_.python_worker) {
    const std::string name = fmt::format("worker{}", topology_.cpp_workers);
    const std::string python_path = topology_.source_dir + "/clients/python:" + topology_.source_dir + "/tests/python";
    add(name, nodes_.workers, [this, name] {
      std::vector<std::string> argv = {"/usr/bin/python3", "-B", topology_.source_dir + "/tests/python/record_worker.py"};
      for (const auto& b : nodes_.brokers) argv.insert(argv.end(), {"--broker", fmt::format("tcp://{}:{}", net_.ip(b), kBrokerPort)});
      argv.insert(argv.end(), {"--queue", topology_.queue, "--concurrency", "4", "--record",
                               (dir_ / ("starts-" + name + ".txt")).string()});
      return argv;
    }, {"PYTHONPATH=" + python_path});
  }
  if (!topology_.new_queues.empty()) {
    const std::string name = fmt::format("worker{}", nodes_.workers.size());
    add(name, nodes_.workers, [this, name] {
      std::vector<std::string> argv = {topology_.bin_dir + "/dueq-example-worker", "--broker", broker_endpoints(), "--concurrency",
                                       "4", "--record", (dir_ / ("starts-" + name + ".txt")).string()};
      for (const auto& queue : topology_.new_queues) argv.insert(argv.end(), {"--queue", queue});
      return argv;
    });
  }
  for (const auto& name : nodes_.all()) {
    if (!net_.add(name)) {
      why = net_.why_not();
      return false;
    }
  }
  if (!add_proxies(why)) return false;
  mount_disks();
  for (const auto& name : nodes_.redis) start(name);
  if (topology_.cluster && !create_cluster(why)) return false;
  for (const auto& name : nodes_.sentinels) start(name);
  for (const auto& name : nodes_.brokers) start(name);
  for (const auto& name : nodes_.workers) start(name);
  return true;
}

bool Deployment::add_proxies(std::string& why) {
  for (const auto& node : nodes_.linked()) {
    try {
      proxies_[node] = std::make_unique<testing::LinkProxy>(
          testing::LinkProxy::Placement{net_.namespace_path(node), kProxyPort, kProxyMark});
    } catch (const std::exception& e) {
      why = e.what();
      return false;
    }
    const int port = node.starts_with("broker") ? kRedisPort : kBrokerPort;
    if (!net_.redirect(node, port, kProxyPort, kProxyMark)) {
      why = "iptables could not add a REDIRECT in the nat table of " + node + "'s namespace";
      return false;
    }
  }
  return true;
}

void Deployment::slow_links(const std::string& node, int64_t delay_ms, int64_t jitter_ms, int loss_permille) {
  if (auto it = proxies_.find(node); it != proxies_.end())
    it->second->set_link(std::chrono::milliseconds(delay_ms), std::chrono::milliseconds(jitter_ms), loss_permille);
}

void Deployment::hold_links(const std::string& node, bool held, const std::string& marker) {
  auto it = proxies_.find(node);
  if (it == proxies_.end()) return;
  if (held && !marker.empty()) {
    it->second->hold_from(marker);
  } else if (held) {
    it->second->hold();
  } else {
    it->second->release();
  }
}

void Deployment::heal_links() {
  for (const auto& [node, proxy] : proxies_) {
    proxy->release();
    proxy->set_link({}, {}, 0);
  }
}

std::string Deployment::broker_endpoints() const {
  std::string out;
  for (const auto& b : nodes_.brokers) out += (out.empty() ? "" : ",") + fmt::format("tcp://{}:{}", net_.ip(b), kBrokerPort);
  return out;
}

void Deployment::start(const std::string& node) {
  if (is_store(node)) {
    store_killer_ = std::jthread();  // stops and joins the killer: its broker starts it again
    store_held_down_ = false;
    return;
  }
  Node& n = nodes_by_name_.at(node);
  std::vector<std::string> argv = net_.exec_prefix(node);
  for (auto& arg : n.command()) argv.push_back(std::move(arg));
  n.process = std::make_unique<testing::Process>(argv, (dir_ / (node + ".log")).string(), n.env);
  n.down = false;
}

void Deployment::shift_clock(const std::string& broker, int64_t shift_ms) {
  const int fd = ::open((dir_ / ("clock-" + broker)).c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  // One aligned 8-byte write: the broker reads the old or the new value.
  (void)!::pwrite(fd, &shift_ms, sizeof shift_ms, 0);
  ::close(fd);
}

bool Deployment::is_store(const std::string& node) const {
  return std::find(nodes_.stores.begin(), nodes_.stores.end(), node) != nodes_.stores.end();
}

int Deployment::live_store_pid() const {
  std::ifstream file(store_dir() / "redis.pid");
  int pid = -1;
  if (!(file >> pid) || pid <= 0 || ::kill(pid, 0) != 0) return -1;
  return pid;
}

bool Deployment::is_down(const std::string& node) const {
  return is_store(node) ? store_held_down_.load() : nodes_by_name_.at(node).down;
}

void Deployment::signal(const std::string& node, int signo) {
  if (is_store(node)) {
    if (const int pid = live_store_pid(); pid > 0) ::kill(pid, signo);
    return;
  }
  if (const auto& p = nodes_by_name_.at(node).process) p->signal(signo);
}

void Deployment::note_rss(const std::string& node) {
  const auto& p = nodes_by_name_.at(node).process;
  if (p && p->running()) broker_peak_rss_kb_ = std::max(broker_peak_rss_kb_, status_field_kb(p->pid(), "VmHWM"));
}

void Deployment::kill(const std::string& node) {
  if (is_store(node)) {
    store_held_down_ = true;
    signal(node, SIGKILL);
    store_killer_ = std::jthread([this, node](const std::stop_token& stop) {
      while (!stop.stop_requested()) {
        signal(node, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    return;
  }
  take_down(node, SIGKILL);
}

void Deployment::stop(const std::string& node) { take_down(node, SIGTERM); }

void Deployment::take_down(const std::string& node, int signo) {
  Node& n = nodes_by_name_.at(node);
  if (node.starts_with("broker")) note_rss(node);
  n.down = true;
  if (!n.process) return;
  n.process->signal(signo);
  n.process->wait();
}

std::string Deployment::cli(const std::string& node, const std::string& args) const {
  if (is_store(node))
    return testing::command_output(fmt::format("timeout 3 redis-cli -s {} {} 2>&1", (store_dir() / "redis.sock").string(), args));
  const int port = node.starts_with("sentinel") ? 26379 : 6379;
  return testing::command_output(
      fmt::format("timeout 3 redis-cli {}-h {} -p {} {} 2>&1", topology_.cluster ? "-c " : "", net_.ip(node), port, args));
}

std::string Deployment::live_redis() const {
  for (const auto& r : nodes_.redis)
    if (cli(r, "PING").starts_with("PONG")) return r;
  return "";
}

bool Deployment::create_cluster(std::string& why) {
  std::string hosts;
  for (const auto& r : nodes_.redis) {
    hosts += " " + net_.ip(r) + ":6379";
    if (!testing::eventually([&] { return cli(r, "PING").starts_with("PONG"); }, std::chrono::seconds(20))) {
      why = r + " did not answer PING in 20 s";
      return false;
    }
  }
  const std::string created =
      testing::command_output("redis-cli --cluster create" + hosts + " --cluster-replicas 1 --cluster-yes 2>&1");
  if (created.find("[OK] All 16384 slots covered") == std::string::npos) {
    why = "redis-cli --cluster create failed: " + created;
    return false;
  }
  for (const auto& r : nodes_.redis)
    if (!testing::eventually([&] { return cli(r, "CLUSTER INFO").find("cluster_state:ok") != std::string::npos; },
                             std::chrono::seconds(30))) {
      why = r + " did not see the cluster ok in 30 s";
      return false;
    }
  return true;
}

void Deployment::fail_over() {
  if (!topology_.cluster) {
    for (const auto& s : nodes_.sentinels)
      if (cli(s, std::string("SENTINEL FAILOVER ") + kMasterName).starts_with("OK")) return;
    return;
  }
  for (const auto& r : nodes_.redis)
    if (cli(r, "ROLE").starts_with("slave") && cli(r, "CLUSTER FAILOVER").starts_with("OK")) return;
}

namespace {

// A field of INFO's output ("master_repl_offset"), or -1.
int64_t info_field(const std::string& info, const std::string& name) {
  const auto at = info.find(name + ":");
  return at == std::string::npos ? -1 : std::strtoll(info.c_str() + at + name.size() + 1, nullptr, 10);
}

}  // namespace

bool Deployment::move_master(const std::string& to) {
  const std::string from = master();
  const bool back = to == nodes_.redis[0];
  if (!topology_.plain_url || to == from) return false;
  // Moving back: the first master's link to the current one comes back, so
  // that it catches up before it takes over.
  if (back) {
    net_.heal();
    testing::eventually([&] { return cli(to, "INFO replication").find("master_link_status:up") != std::string::npos; },
                        std::chrono::seconds(15), std::chrono::milliseconds(20));
  }
  // Writes wait in the old master until the new one holds all it took.
  cli(from, "CLIENT PAUSE 5000 WRITE");
  const int64_t offset = info_field(cli(from, "INFO replication"), "master_repl_offset");
  const bool caught_up = testing::eventually(
      [&] { return offset >= 0 && info_field(cli(to, "INFO replication"), "master_repl_offset") >= offset; },
      std::chrono::seconds(3), std::chrono::milliseconds(10));
  if (caught_up) {
    cli(to, "REPLICAOF NO ONE");
    // The old master does not follow the new one: cut off from it, as
    // when the switch was made because it could not be seen.
    if (!back) net_.cut(from, {to}, true, true);
    for (const auto& r : nodes_.redis)
      if (r != to) cli(r, fmt::format("REPLICAOF {} 6379", net_.ip(to)));
    for (const auto& b : nodes_.brokers)
      if (auto it = proxies_.find(b); it != proxies_.end()) it->second->repoint(net_.ip(nodes_.redis[0]), net_.ip(to));
    addressed_ = to;
  }
  // The writes paused meet a replica now: READONLY, on the old connections.
  cli(from, "CLIENT UNPAUSE");
  return caught_up;
}

std::string Deployment::master() const {
  if (topology_.embedded) return nodes_.stores[0];
  if (topology_.plain_url) return addressed_.empty() ? nodes_.redis[0] : addressed_;
  if (topology_.cluster) return live_redis();
  for (const auto& s : nodes_.sentinels) {
    std::istringstream reply(cli(s, std::string("SENTINEL get-master-addr-by-name ") + kMasterName));
    std::string ip;
    if (!std::getline(reply, ip)) continue;
    for (const auto& r : nodes_.redis)
      if (net_.ip(r) == ip) return r;
  }
  return "";
}

std::string Deployment::leader() const {
  const std::string m = master();
  if (m.empty()) return "";
  // "<epoch> <instance> tcp://<ip>:<port>"
  const std::string holder = cli(m, "GET dueq:{leader}:holder");
  for (const auto& b : nodes_.brokers)
    if (holder.find(fmt::format("tcp://{}:{}", net_.ip(b), kBrokerPort)) != std::string::npos) return b;
  return "";
}

bool Deployment::sentinels_ready() const {
  for (const auto& s : nodes_.sentinels) {
    const std::string out = cli(s, std::string("SENTINEL master ") + kMasterName);
    if (out.find("num-other-sentinels\n2\n") == std::string::npos || out.find("num-slaves\n2\n") == std::string::npos)
      return false;
  }
  return true;
}

bool Deployment::ensure_master() {
  if (topology_.cluster)
    return testing::eventually([&] {
      const std::string node = live_redis();
      return !node.empty() && cli(node, "CLUSTER INFO").find("cluster_state:ok") != std::string::npos;
    }, std::chrono::seconds(50), std::chrono::milliseconds(200));
  const auto named_master_is_one = [&] {
    const std::string m = master();
    return !m.empty() && cli(m, "ROLE").starts_with("master");
  };
  const int64_t asked_at = steady_ms() + 20'000;
  bool asked = false;
  while (!named_master_is_one()) {
    if (topology_.plain_url) cli(master(), "REPLICAOF NO ONE");
    if (!asked && steady_ms() > asked_at) {
      for (const auto& s : nodes_.sentinels) cli(s, std::string("SENTINEL FAILOVER ") + kMasterName);
      asked = true;
    }
    if (steady_ms() > asked_at + 30'000) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return true;
}

void Deployment::tend() {
  for (const auto& name : nodes_.workers) {
    Node& n = nodes_by_name_.at(name);
    if (n.down || !n.process || n.process->running()) continue;
    const int64_t now = wall_ms();
    append_line(dir_ / "faults.tsv", {std::to_string(now - 250), std::to_string(now), "poison", name + " exited", "0"});
    start(name);
  }
}

int64_t Deployment::broker_peak_rss_kb() {
  for (const auto& b : nodes_.brokers) note_rss(b);
  return broker_peak_rss_kb_;
}

int64_t Deployment::redis_peak_bytes() const {
  int64_t peak = 0;
  std::vector<std::string> stores = nodes_.redis;
  stores.insert(stores.end(), nodes_.stores.begin(), nodes_.stores.end());
  for (const auto& r : stores) {
    std::istringstream info(cli(r, "INFO memory"));
    for (std::string line; std::getline(info, line);)
      if (line.starts_with("used_memory_peak:")) peak = std::max<int64_t>(peak, std::stoll(line.substr(17)));
  }
  return peak;
}

}  // namespace dueq::nemesis
