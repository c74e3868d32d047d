#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace dueq::broker {

// Encoding pins. A queue's jobs, tokens and leased keys hold every job in
// flight: tens to hundreds of entries under load, where Redis keeps a hash
// or sorted set as a listpack and every HSET, HMGET, ZADD or ZREM scans all
// of it (an HSET of 26 records took 30 us, against 6 us in a hashtable).
// lua/pin_encoding.lua puts one long entry, the pin, into each: longer than
// the hash-max-listpack-value and zset-max-listpack-value of the Redis in
// use (the broker reads them at start, broker/store/redis_settings.hpp), it turns
// the key into a hashtable or skiplist for good, and keeps it from being
// deleted when its jobs are gone. Job ids hold no space and the pin does:
// scripts skip it through lua/lib/encoding_pin.lua, the auditor through
// is_encoding_pin, and in leased its deadline is +inf.
// The schedule partitions get no pin: they stay listpacks (broker/store/keys.hpp).
// The shortest pin: longer than deploy/redis.conf's limits (1024).
inline constexpr size_t kEncodingPinBytes = 1025;
// The longest pin pin_encoding.lua takes: a Redis whose limits reach it
// keeps every key a listpack and is refused.
inline constexpr size_t kMaxEncodingPinBytes = 65536;
// Its text is stored in Redis: kept as first written (a new text would add
// a second pin beside the old one in every store).
inline std::string encoding_pin(size_t bytes = kEncodingPinBytes) {
  std::string text = "dueq encoding pin: keeps this key out of listpack encoding (broker/store/keys.hpp) ";
  text.resize(bytes, '.');
  return text;
}
inline bool is_encoding_pin(std::string_view entry) { return entry.find(' ') != std::string_view::npos; }

}  // namespace dueq::broker
