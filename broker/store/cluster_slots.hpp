#pragma once
// Redis Cluster's addressing, read off the wire: the slot of a key, the
// slot map CLUSTER SLOTS answers, and MOVED / ASK redirections. hiredis 0.14
// has no cluster support and Debian packages no C or C++ cluster client, so
// these few rules (the Redis Cluster specification's) are kept here; the
// parsers take replies from any node and are fuzzed (tests/fuzz).
#include <hiredis/hiredis.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "common/redis_url.hpp"

namespace dueq::broker {

inline constexpr uint32_t kClusterSlots = 16'384;

// CRC16 (XMODEM) of the key's hash tag ({...}, when non-empty), mod 16384.
uint32_t key_slot(std::string_view key);

struct SlotRange {
  uint32_t first = 0;
  uint32_t last = 0;  // inclusive
  HostPort master;
};

// CLUSTER SLOTS as `asked` answered it: the ranges and their masters
// (replicas are ignored). An empty host means `asked`'s own (a node that
// has met no other does not know its address). Refuses a reply that is not
// one, has a slot out of range or a bad port.
Result<std::vector<SlotRange>> parse_cluster_slots(const redisReply* reply, const HostPort& asked);

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381".
struct Redirect {
  bool ask = false;  // ASK: this command only, after ASKING; MOVED: from now on
  uint32_t slot = 0;
  HostPort to;
};
std::optional<Redirect> parse_redirect(std::string_view error);

}  // namespace dueq::broker
