#pragma once
// Wall-clock milliseconds are what due times are written in; every process
// reads the same clock through these helpers so tests and logs agree.
#include <chrono>
#include <cstdint>

namespace dueq {

inline int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

inline int64_t wall_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace dueq
