#pragma once
// A private redis-server for one test: free loopback port, its own temp dir,
// AOF on (as in production), stopped and removed when the fixture ends.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "tests/support/process.hpp"

namespace dueq::testing {

// 127.0.0.1:`port` as a socket address.
inline sockaddr_in loopback_address(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

// Whether a loopback TCP port can be bound right now.
inline bool port_bindable(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopback_address(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// Whether a Redis server (or sentinel) on this loopback port answers PING
// with PONG within 200 ms: one connection in this process, where redis-cli
// was a shell and a process per try (most of the 2,905 redis-cli runs
// of a suite at 4cc64dc).
inline bool answers_ping(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const timeval limit{0, 200'000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  sockaddr_in addr = loopback_address(port);
  bool pong = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
    std::string got;
    char buffer[64];
    ssize_t n = 0;
    while (got.find("\r\n") == std::string::npos && (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0) got.append(buffer, static_cast<size_t>(n));
    pong = got.starts_with("+PONG\r\n");
  }
  ::close(fd);
  return pong;
}

// A port nothing listens on, for a server a test starts. Taken below the
// kernel's ephemeral range: the source ports of outgoing connections (many,
// in a parallel suite) come from that range, and one of them could take a
// port handed out here before its server binds it ("Address already in
// use"). Random, so that tests running at once rarely pick the same one;
// never one this process handed out before (a broker's ZeroMQ and HTTP
// ports, drawn one after the other, once came out the same).
inline int free_port() {
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  constexpr int kLowest = 10'000;
  thread_local std::mt19937 random(std::random_device{}());
  static std::mutex given_mutex;
  static std::set<int> given;
  if (ephemeral_low > kLowest + 1'000)
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int port = kLowest + static_cast<int>(random() % static_cast<unsigned>(ephemeral_low - kLowest));
      std::lock_guard lock(given_mutex);
      if (!given.contains(port) && port_bindable(port)) {
        given.insert(port);
        return port;
      }
    }
  // No room below the range: one the kernel picks.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A free port P with P + 10000 free too, below 55536: a Redis Cluster node
// listens on both (its bus on P + 10000).
inline int free_cluster_port() {
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = 20'000 + (free_port() % 25'000);
    if (port_bindable(port) && port_bindable(port + 10'000)) return port;
  }
  throw std::runtime_error("no free port pair for a cluster node");
}

inline std::filesystem::path make_temp_dir(const std::string& tag) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("dueq-" + tag + "-XXXXXX")).string();
  return ::mkdtemp(pattern.data());
}

// A test's own temp dir, removed when the test ends unless it failed (the
// logs are kept for a look). Declared before the processes that write into
// it, so it goes after them.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) : path_(make_temp_dir(tag)) {}
  ~TempDir() {
    std::error_code ec;
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Runs a shell command and returns its standard output without trailing newlines.
inline std::string command_output(const std::string& cmd) {
  std::string out;
  if (FILE* pipe = ::popen(cmd.c_str(), "r")) {
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    ::pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// How many times `needle` occurs in `text` (overlaps counted).
inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++count;
  return count;
}

// The words of `args` as /bin/sh splits them (blanks; '...' and "..."
// quoting; backslash escapes), or nothing when it asks the shell for more
// than that (a redirection, a pipe, an expansion) or passes redis-cli an
// option.
inline std::optional<std::vector<std::string>> shell_words(const std::string& args) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const char c = args[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      const size_t end = args.find('\'', i + 1);
      if (end == std::string::npos) return std::nullopt;
      word.append(args, i + 1, end - i - 1);
      i = end;
      in_word = true;
    } else if (c == '"') {
      for (++i; i < args.size() && args[i] != '"'; ++i) {
        if (args[i] == '$' || args[i] == '`') return std::nullopt;
        if (args[i] == '\\' && i + 1 < args.size() && std::string_view("$`\"\\\n").find(args[i + 1]) != std::string_view::npos) ++i;
        word += args[i];
      }
      if (i == args.size()) return std::nullopt;
      in_word = true;
    } else if (c == '\\') {
      if (++i == args.size()) return std::nullopt;
      word += args[i];
      in_word = true;
    } else if (std::string_view("<>|;&$`()").find(c) != std::string_view::npos) {
      return std::nullopt;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty() || words.front().starts_with("-")) return std::nullopt;
  return words;
}

// `reply` as redis-cli prints it when its output is not a terminal: strings
// and errors as they are, integers in decimal, nil as nothing, each element
// of an array (nested ones flattened) on a line of its own.
inline void append_cli_text(const redisReply* reply, std::string& out) {
  switch (reply->type) {
    case REDIS_REPLY_INTEGER:
      out += std::to_string(reply->integer);
      break;
    case REDIS_REPLY_ARRAY:
      for (size_t i = 0; i < reply->elements; ++i) {
        if (i > 0) out += '\n';
        append_cli_text(reply->element[i], out);
      }
      break;
    case REDIS_REPLY_NIL:
      break;
    default:
      out.append(reply->str, reply->len);
  }
}

// What `redis-cli -p PORT ARGS 2>&1` prints (trailing newlines dropped),
// for one command asked over a connection of this process: a redis-cli is
// a shell and a process, about 50 ms of CPU on a loaded machine, and tests
// poll with it. ARGS the shell would do more with still go to a redis-cli.
inline std::string redis_cli_output(int port, const std::string& args) {
  const auto words = shell_words(args);
  if (!words) return command_output("redis-cli -p " + std::to_string(port) + " " + args + " 2>&1");
  const std::string at = "127.0.0.1:" + std::to_string(port);
  const std::unique_ptr<redisContext, decltype(&redisFree)> c(redisConnectWithTimeout("127.0.0.1", port, timeval{5, 0}),
                                                              &redisFree);
  if (!c) return "Could not connect to Redis at " + at + ": out of memory";
  if (c->err != 0) return "Could not connect to Redis at " + at + ": " + c->errstr;
  // Longer than any command a test sends blocks (WAIT 1 5000): redis-cli waits without limit.
  redisSetTimeout(c.get(), timeval{120, 0});
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const auto& w : *words) {
    argv.push_back(w.data());
    lengths.push_back(w.size());
  }
  const std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(
      static_cast<redisReply*>(redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lengths.data())),
      &freeReplyObject);
  if (!reply) return std::string("Error: ") + c->errstr;
  std::string out;
  append_cli_text(reply.get(), out);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

class RedisServer {
 public:
  explicit RedisServer(std::vector<std::string> extra_args = {}, int port = 0)
      : dir_(make_temp_dir("redis")), port_(port != 0 ? port : free_port()), extra_args_(std::move(extra_args)) {
    start();
  }
  ~RedisServer() {
    process_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // (Re)starts the server on the same port and data dir with the same settings.
  void start() {
    std::vector<std::string> argv = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                     "--dir", dir_.string(), "--appendonly", "yes", "--appendfsync", "everysec",
                                     "--save", "", "--maxmemory-policy", "noeviction", "--hash-max-listpack-value", "1024",
                                     "--hash-max-listpack-entries", "256", "--zset-max-listpack-entries", "256",
                                     "--auto-aof-rewrite-min-size", "1gb",
                                     "--daemonize", "no"};
    for (auto& a : extra_args_) argv.push_back(a);
    process_ = std::make_unique<Process>(argv, (dir_ / "redis.log").string());
    wait_ready();
  }
  void kill(int signo) {
    process_->signal(signo);
    process_->wait();
  }

  int port() const { return port_; }
  pid_t pid() const { return process_->pid(); }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  const std::filesystem::path& dir() const { return dir_; }

  // What redis-cli prints for ARGS against this server (redis_cli_output).
  std::string cli(const std::string& args) const { return redis_cli_output(port_, args); }

 private:
  void wait_ready() {
    // Up to 20 s: a loaded machine may take seconds to start a process.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (answers_ping(port_)) return;
      if (!process_->running()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("redis-server did not start; see " + (dir_ / "redis.log").string());
  }

  std::filesystem::path dir_;
  int port_;
  std::vector<std::string> extra_args_;
  std::unique_ptr<Process> process_;
};

}  // namespace dueq::testing
