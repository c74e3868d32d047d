#include "broker/store/redis_settings.hpp"

#include "broker/store/encoding_pin.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>

namespace dueq::broker {

namespace {

// CONFIG GET of each name, in one round trip; nullopt where Redis gave no
// value (CONFIG renamed or disabled).
Result<std::vector<std::optional<std::string>>> config_values(RedisClient& redis, const std::vector<std::string>& names) {
  std::vector<Command> reads;
  reads.reserve(names.size());
  for (const auto& name : names) reads.push_back(Command{"CONFIG", "GET", name});
  auto replies = redis.pipeline(std::move(reads));
  if (!replies) return std::unexpected(replies.error());
  std::vector<std::optional<std::string>> values;
  for (const auto& value : *replies) {
    const redisReply* r = value.get();
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) values.push_back(reply::str(r->element[1]));
    else values.push_back(std::nullopt);
  }
  return values;
}

}  // namespace

Result<void> check_durability_settings(RedisClient& redis) {
  auto values = config_values(redis, {"appendonly", "maxmemory-policy"});
  if (!values) return std::unexpected(values.error());
  const auto& appendonly = (*values)[0];
  const auto& policy = (*values)[1];
  if (!appendonly || !policy)
    return fail(Errc::unavailable,
                "cannot read Redis settings with CONFIG GET (is the command renamed or disabled?); "
                "check appendonly=yes and maxmemory-policy=noeviction by hand and start with --allow-unsafe-redis");
  if (*appendonly != "yes")
    return fail(Errc::bad_argument,
                "Redis has appendonly=" + *appendonly +
                    ": accepted jobs would be lost on a restart. Set 'appendonly yes' and 'appendfsync everysec' "
                    "in redis.conf (or CONFIG SET appendonly yes), or pass --allow-unsafe-redis for development");
  if (*policy != "noeviction")
    return fail(Errc::bad_argument,
                "Redis has maxmemory-policy=" + *policy +
                    ": Redis may evict jobs under memory pressure. Set 'maxmemory-policy noeviction' in redis.conf, "
                    "or pass --allow-unsafe-redis for development");
  return {};
}

Result<std::string> settings_advice(RedisClient& redis) {
  struct Wanted {
    const char* name;
    int64_t value;
    const char* cost;
  };
  static constexpr const char* kMemory = "scheduled jobs will use more Redis memory than they need";
  static constexpr const char* kRewrites =
      "under load AOF rewrites (a fork and a full write of the dataset) come every few seconds";
  static constexpr std::array<Wanted, 4> kWanted = {{{"hash-max-listpack-value", 1024, kMemory},
                                                     {"hash-max-listpack-entries", 256, kMemory},
                                                     {"zset-max-listpack-entries", 256, kMemory},
                                                     {"auto-aof-rewrite-min-size", int64_t{1} << 30, kRewrites}}};
  std::vector<std::string> names;
  names.reserve(kWanted.size());
  for (const auto& w : kWanted) names.emplace_back(w.name);
  auto values = config_values(redis, names);
  if (!values) return std::unexpected(values.error());
  std::string advice;
  for (const char* cost : {kMemory, kRewrites}) {
    std::string low;
    for (size_t i = 0; i < kWanted.size(); ++i) {
      if (kWanted[i].cost != cost || !(*values)[i]) continue;  // CONFIG disabled: nothing to say
      if (const int64_t have = std::strtoll((*values)[i]->c_str(), nullptr, 10); have < kWanted[i].value)
        low += fmt::format("{}{} is {} (recommended: {})", low.empty() ? "" : ", ", kWanted[i].name, have, kWanted[i].value);
    }
    if (!low.empty()) advice += fmt::format("{}{}: {}", advice.empty() ? "" : "; ", low, cost);
  }
  if (!advice.empty()) advice += " (see deploy/redis.conf)";
  return advice;
}

Result<size_t> encoding_pin_bytes(RedisClient& redis) {
  static const std::vector<std::string> kLimits = {"hash-max-listpack-value", "zset-max-listpack-value"};
  auto values = config_values(redis, kLimits);
  if (!values) return std::unexpected(values.error());
  size_t bytes = kEncodingPinBytes;
  for (size_t i = 0; i < kLimits.size(); ++i) {
    if (!(*values)[i]) continue;  // CONFIG disabled: check_durability_settings says so
    const int64_t limit = std::strtoll((*values)[i]->c_str(), nullptr, 10);
    if (limit >= static_cast<int64_t>(kMaxEncodingPinBytes))
      return fail(Errc::bad_argument,
                  fmt::format("Redis has {} {}: the broker keeps each queue's jobs, tokens and leased keys out of "
                              "listpack encoding with an entry longer than it, of at most {} bytes. Set it to at most "
                              "{} (deploy/redis.conf has 1024)",
                              kLimits[i], limit, kMaxEncodingPinBytes, kMaxEncodingPinBytes - 1));
    bytes = std::max(bytes, static_cast<size_t>(std::max<int64_t>(limit, 0)) + 1);
  }
  return bytes;
}

}  // namespace dueq::broker
