#pragma once
// Redis Sentinel for one test: `count` redis-sentinel processes on free
// loopback ports watching one master, each with its own config file (which
// sentinel rewrites) in a temp dir; stopped with the fixture.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/process.hpp"
#include "tests/support/redis_server.hpp"

namespace dueq::testing {

class Sentinels {
 public:
  static constexpr int kDownAfterMs = 1'000;

  Sentinels(int count, int master_port, std::string master_name = "mymaster")
      : dir_(make_temp_dir("sentinel")), master_name_(std::move(master_name)) {
    for (int i = 0; i < count; ++i) {
      const int port = free_port();
      const auto config = dir_ / ("sentinel" + std::to_string(i) + ".conf");
      std::ofstream(config) << "port " << port << "\nbind 127.0.0.1\ndaemonize no\ndir " << dir_.string()
                            << "\nsentinel monitor " << master_name_ << " 127.0.0.1 " << master_port << " 2\n"
                            << "sentinel down-after-milliseconds " << master_name_ << " " << kDownAfterMs << "\n"
                            << "sentinel failover-timeout " << master_name_ << " 3000\n"
                            << "sentinel parallel-syncs " << master_name_ << " 1\n";
      ports_.push_back(port);
      processes_.push_back(std::make_unique<Process>(std::vector<std::string>{"redis-sentinel", config.string()},
                                                     (dir_ / ("sentinel" + std::to_string(i) + ".log")).string()));
    }
  }
  ~Sentinels() {
    processes_.clear();
    std::error_code ec;
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir_, ec);
  }

  // sentinel://127.0.0.1:P1,127.0.0.1:P2,.../mymaster
  std::string url() const {
    std::string out = "sentinel://";
    for (size_t i = 0; i < ports_.size(); ++i) out += (i == 0 ? "" : ",") + std::string("127.0.0.1:") + std::to_string(ports_[i]);
    return out + "/" + master_name_;
  }
  std::string cli(size_t sentinel, const std::string& args) const { return redis_cli_output(ports_.at(sentinel), args); }
  // Stops sentinel `i` for good (SIGKILL).
  void kill(size_t i) {
    processes_.at(i)->signal(SIGKILL);
    processes_.at(i)->wait();
  }

  // The master's port as sentinel `i` names it; 0 when it names none.
  int master_port(size_t i = 0) const {
    const std::string out = cli(i, "SENTINEL get-master-addr-by-name " + master_name_);
    const auto newline = out.find('\n');
    if (newline == std::string::npos) return 0;
    try {
      return std::stoi(out.substr(newline + 1));
    } catch (const std::exception&) {
      return 0;
    }
  }
  // Every sentinel knows the others and `replicas` replicas: a fail-over can
  // be agreed on.
  bool ready(size_t replicas) const {
    for (size_t i = 0; i < ports_.size(); ++i) {
      const std::string out = cli(i, "SENTINEL master " + master_name_);
      if (out.find("num-other-sentinels\n" + std::to_string(ports_.size() - 1)) == std::string::npos ||
          out.find("num-slaves\n" + std::to_string(replicas)) == std::string::npos)
        return false;
    }
    return true;
  }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::string master_name_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<Process>> processes_;
};

}  // namespace dueq::testing
