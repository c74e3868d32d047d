#pragma once
// The broker's start-up checks of the Redis it was given.
#include <string>

#include "broker/store/redis_client.hpp"

namespace dueq::broker {

// Refuses a Redis that can lose accepted jobs: persistence off or an
// eviction policy other than noeviction. The message says what to change.
Result<void> check_durability_settings(RedisClient& redis);
// Redis settings below deploy/redis.conf's that cost memory (listpack
// limits) or throughput and latency (the AOF rewrite threshold), as one
// message naming each and what it costs; empty when all are at least as
// high. Advice, not a refusal.
Result<std::string> settings_advice(RedisClient& redis);
// The length of the encoding pins (broker/store/encoding_pin.hpp): one byte past the
// larger of hash-max-listpack-value and zset-max-listpack-value, and at
// least kEncodingPinBytes; kEncodingPinBytes where CONFIG GET gives neither.
// A limit of kMaxEncodingPinBytes or more is refused (no pin could turn the
// hot keys into hashtables), with a message naming the setting.
Result<size_t> encoding_pin_bytes(RedisClient& redis);

}  // namespace dueq::broker
