#pragma once
// What the end-to-end tests read about a running process or a queue to
// report (and bound) what it spent: memory and CPU from /proc, one queue's
// counters over a client's own connection.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>

#include "dueq/client.hpp"
#include "tests/support/redis_server.hpp"

namespace dueq::testing {

// One queue's counters read over `client`'s own connection (a new one may
// be refused or slow in these tests); nullopt if the read failed.
inline std::optional<QueueStats> stats_via(Client& client, const std::string& queue) {
  auto all = client.stats();
  if (!all) return std::nullopt;
  for (const auto& q : *all)
    if (q.queue == queue) return q;
  return std::nullopt;
}

// A memory figure of a process from /proc/PID/status, in kB ("VmRSS:" now,
// "VmHWM:" at its peak); -1 if absent.
inline int64_t memory_kb(pid_t pid, const char* field) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find(field);
  return at == std::string::npos ? -1 : std::stoll(status.substr(at + std::strlen(field)));
}

// CPU time (user + system, ms) of a process.
inline int64_t cpu_ms(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * 1000 / ::sysconf(_SC_CLK_TCK);
}

}  // namespace dueq::testing
