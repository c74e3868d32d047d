#pragma once
// A real deployment for end-to-end tests: redis-server, dueq-broker and any
// number of workers as separate processes, all stopped by the destructor.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dueq/client.hpp"
#include "tests/support/redis_server.hpp"

namespace dueq::testing {

// The binaries under test: the build's, or a copy named by $DUEQ_BIN_DIR (a
// long chaos run keeps its own while the tree is rebuilt).
inline std::string bin(const std::string& name) {
  const char* dir = std::getenv("DUEQ_BIN_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : DUEQ_BIN_DIR) + "/" + name;
}

struct CliRun {
  int code;
  std::string out;
};

// Runs `dueq --broker BROKER ARGS`, capturing stdout (and stderr when asked).
inline CliRun run_dueq(const std::string& broker, const std::string& args, bool with_stderr = true) {
  const std::string cmd = bin("dueq") + " --broker " + broker + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun run{-1, ""};
  if (FILE* pipe = ::popen(cmd.c_str(), "r")) {
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, n);
    const int status = ::pclose(pipe);
    run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return run;
}

// One line of the example worker's --record file.
struct StartRecord {
  std::string id;
  int attempt = 0;
  uint64_t token = 0;
  int64_t start_us = 0;
  int64_t due_ms = 0;
  int64_t created_ms = 0;
  int pid = 0;
  std::string payload;  // "-" when empty or long
};

inline std::vector<StartRecord> read_records(const std::filesystem::path& path) {
  std::vector<StartRecord> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    StartRecord r;
    if (s >> r.id >> r.attempt >> r.token >> r.start_us >> r.due_ms >> r.created_ms >> r.pid >> r.payload) out.push_back(r);
  }
  return out;
}

inline double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(values.size())))];
}

// Polls `condition` until it holds or `timeout` passes: every `every` when
// given; by default after 20 ms, then half as long again each time up to
// 100 ms. Many conditions run a sanitized `dueq` (0.1 s of CPU each) or ask
// the broker, and the suite is bound by its two cores: a condition met at
// once is seen as soon, a long wait asks a fifth as often.
template <typename F>
bool eventually(F condition, std::chrono::milliseconds timeout, std::optional<std::chrono::milliseconds> every = std::nullopt) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds pause = every.value_or(std::chrono::milliseconds(20));
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(pause);
    if (!every) pause = std::min(pause * 3 / 2, std::chrono::milliseconds(100));
  }
  return condition();
}

// `text` as DIR/broker.toml, for a broker's --config.
inline std::filesystem::path write_config(const std::filesystem::path& dir, const std::string& text) {
  auto path = dir / "broker.toml";
  std::ofstream(path) << text;
  return path;
}

class Cluster {
 public:
  // `admin` is how the cluster's own probe and stats reach the broker (its
  // keys, when the broker runs with CURVE).
  explicit Cluster(std::vector<std::string> broker_args = {}, std::vector<std::string> redis_args = {},
                   ClientOptions admin = {})
      : dir_(make_temp_dir("e2e")), port_(free_port()), admin_(std::move(admin)) {
    redis_ = std::make_unique<RedisServer>(std::move(redis_args));
    // The port was free when picked; a process of a test running beside
    // this one may bind it first. Nothing knows the endpoint yet: pick again.
    for (int tries = 1;; ++tries) {
      try {
        start_broker(broker_args);
        return;
      } catch (const std::runtime_error&) {
        if (tries == 3 || broker_->running() || read_file(dir_ / "broker.log").find("Address already in use") == std::string::npos)
          throw;
        port_ = free_port();
      }
    }
  }
  ~Cluster() {
    workers_.clear();
    broker_.reset();
    redis_.reset();
    if (!::testing::Test::HasFailure() && !keep_dir_) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    } else {
      fprintf(stderr, "keeping logs in %s\n", dir_.c_str());
    }
  }

  // Keeps the logs and data when the cluster goes (outside gtest, where a
  // failure is not a gtest failure).
  void keep_dir() { keep_dir_ = true; }

  void start_broker(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {bin("dueq-broker"), "--redis", redis_url_.empty() ? redis_->url() : redis_url_,
                                     "--listen", endpoint()};
    if (std::find(extra.begin(), extra.end(), "--log-level") == extra.end()) extra.insert(extra.end(), {"--log-level", "info"});
    for (auto& a : extra) argv.push_back(a);
    broker_ = std::make_unique<Process>(argv, (dir_ / "broker.log").string());
    ClientOptions probe_options = admin_;
    probe_options.timeout_ms = 200;
    probe_options.attempts = 1;
    Client probe(endpoint(), probe_options);
    // A broker that exits (its port taken, a bad flag) is not waited for.
    if (!eventually([&] { return !broker_->running() || probe.stats().has_value(); }, std::chrono::seconds(20)) ||
        !broker_->running())
      throw std::runtime_error("broker did not come up; see " + (dir_ / "broker.log").string());
  }

  // The brokers started from now on reach Redis through `url` (a
  // sentinel:// URL, say) instead of the cluster's own redis:// one.
  void use_redis_url(std::string url) { redis_url_ = std::move(url); }
  // The brokers started from now on listen on `host` (an address of this
  // machine) instead of 127.0.0.1; endpoint() names it.
  void use_listen_host(std::string host) { listen_host_ = std::move(host); }

  // Starts the library example worker; returns its index.
  size_t start_example_worker(const std::string& queue, int concurrency, const std::string& record) {
    return start_worker({bin("dueq-example-worker"), "--broker", endpoint(), "--queue", queue, "--concurrency",
                         std::to_string(concurrency), "--record", record});
  }

  size_t start_worker(std::vector<std::string> argv) {
    const size_t index = workers_.size();
    workers_.push_back(std::make_unique<Process>(argv, (dir_ / ("worker" + std::to_string(index) + ".log")).string()));
    return index;
  }

  // Waits until at least `n` workers are registered with the broker now
  // (joined, and neither gone nor declared dead), as its stats say.
  bool wait_for_workers(size_t n) {
    ClientOptions options = admin_;
    options.timeout_ms = 2000;
    options.attempts = 1;
    Client probe(endpoint(), options);
    return eventually([&] {
      auto s = probe.broker_stats();
      return s && s->workers >= n;
    }, std::chrono::seconds(20));
  }

  // The remote ports of the TCP connections the broker has not closed yet
  // (ESTABLISHED or CLOSE_WAIT on its port in /proc/net/tcp): a peer's port
  // leaves this set once the broker has taken in its disconnect.
  std::set<int> open_connection_ports() const {
    std::set<int> ports;
    std::istringstream table(read_file("/proc/net/tcp"));
    std::string line;
    std::getline(table, line);  // header
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const auto port_of = [](const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1), nullptr, 16); };
      if (local.find(':') == std::string::npos || remote.find(':') == std::string::npos) continue;
      if (port_of(local) == port_ && (state == "01" || state == "08")) ports.insert(port_of(remote));
    }
    return ports;
  }

  // The names of every queue's keys in Redis, one per line (the leader
  // lease's keys left out).
  std::string queue_keys() const {
    std::istringstream all(redis_->cli("KEYS 'dueq:{*'"));
    std::string keys, key;
    while (std::getline(all, key))
      if (!key.starts_with("dueq:{leader}:")) keys += key + "\n";
    return keys;
  }

  size_t log_count(const std::string& needle) const {
    return count_of(read_file(dir_ / "broker.log"), needle);
  }

  std::optional<QueueStats> stats(const std::string& queue) {
    ClientOptions options = admin_;
    options.timeout_ms = 2000;
    options.attempts = 1;
    Client client(endpoint(), options);
    auto s = client.stats();
    if (!s) return std::nullopt;
    for (const auto& q : *s)
      if (q.queue == queue) return q;
    return std::nullopt;
  }

  std::string endpoint() const { return "tcp://" + listen_host_ + ":" + std::to_string(port_); }
  const std::filesystem::path& dir() const { return dir_; }
  Process& broker() { return *broker_; }
  Process& worker(size_t i) { return *workers_.at(i); }
  size_t worker_count() const { return workers_.size(); }
  RedisServer& redis() { return *redis_; }

 private:
  bool keep_dir_ = false;
  std::filesystem::path dir_;
  int port_;
  ClientOptions admin_;
  std::string redis_url_;
  std::string listen_host_ = "127.0.0.1";
  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<Process> broker_;
  std::vector<std::unique_ptr<Process>> workers_;
};

}  // namespace dueq::testing
