#include "common/ids.hpp"

#include <random>

#include "common/clock.hpp"

namespace dueq {

namespace {

std::mt19937_64& rng() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return engine;
}

}  // namespace

std::string new_job_id() {
  static constexpr char kAlphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  const uint64_t ms = static_cast<uint64_t>(wall_ms());
  const uint64_t hi = rng()();
  const uint64_t lo = rng()();
  // 130 bits laid out as: 48 bits time, then 82 bits random (2 wasted).
  std::string id(26, '0');
  for (int i = 0; i < 10; ++i) id[i] = kAlphabet[(ms >> (45 - 5 * i)) & 31];
  for (int i = 0; i < 8; ++i) id[10 + i] = kAlphabet[(hi >> (5 * i)) & 31];
  for (int i = 0; i < 8; ++i) id[18 + i] = kAlphabet[(lo >> (5 * i)) & 31];
  return id;
}

std::string new_instance_id() {
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t v = rng()();
  std::string out(16, '0');
  for (int i = 0; i < 16; ++i) out[i] = kHex[(v >> (4 * i)) & 15];
  return out;
}

}  // namespace dueq
