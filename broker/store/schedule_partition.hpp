#pragma once
// The schedule's partitions (broker/store/keys.hpp: `schedule:<p>`): which one a
// job id belongs to, and where its counter sits in the schedule filter.
// Lua computes both by the same rules (lua/lib/partition.lua,
// lua/lib/schedule_filter.lua).
#include <xxhash.h>

#include <cstdint>
#include <string_view>

namespace dueq::broker {

// The schedule filter's chunks: chunk C holds the counters of partitions
// 1000*C .. 1000*C+999 under <filter prefix>:C (lua/lib/schedule_filter.lua).
inline constexpr uint32_t kScheduleFilterChunks = 33;
inline constexpr uint32_t kPartitionsPerFilterChunk = 1000;

// Partitions of a queue's schedule. Fixed: changing it would strand every
// scheduled job in a partition its id no longer maps to (the Lua scripts
// check partition numbers against it too). 32,768 keeps a partition near 30
// jobs at a million scheduled, so the linear scans inside a listpack stay
// short (an enqueue's duplicate check looks in one), and under Redis's
// listpack limit (256 entries in deploy/redis.conf) up to about 6 million
// scheduled jobs per queue; past that partitions turn into ordinary
// hashtables and skiplists, which costs memory, not correctness.
inline constexpr uint32_t kSchedulePartitions = 32768;
static_assert(kScheduleFilterChunks * kPartitionsPerFilterChunk >= kSchedulePartitions &&
              (kScheduleFilterChunks - 1) * kPartitionsPerFilterChunk < kSchedulePartitions);

// The schedule partition of a job id (xxh3, stable across versions and hosts).
inline uint32_t schedule_partition(std::string_view id) {
  return static_cast<uint32_t>(XXH3_64bits(id.data(), id.size()) % kSchedulePartitions);
}

// The schedule filter's bucket of an id within its chunk as a BITFIELD bit
// offset: what lua/lib/schedule_filter.lua's filter_bit_offset computes, so
// that enqueue.lua reads a batch's counters with the broker's arguments
// instead of building them per job (it checks them against its own).
// The tail hashes the id's last three bytes as Lua's string.byte(id, -3, -1)
// returns them: an id shorter than three has its missing bytes at the end.
inline uint32_t schedule_filter_bit_offset(uint32_t partition, std::string_view id) {
  uint32_t bytes[3] = {0, 0, 0};
  const size_t from = id.size() > 3 ? id.size() - 3 : 0;
  for (size_t i = from; i < id.size(); ++i) bytes[i - from] = static_cast<unsigned char>(id[i]);
  const uint32_t tail = (bytes[0] * 961 + bytes[1] * 31 + bytes[2]) % 100;
  return ((partition % kPartitionsPerFilterChunk) * 100 + tail) * 8;
}

}  // namespace dueq::broker
