#pragma once
// Brings a store written by an older dueq up to date when the broker starts,
// before anything enqueues or reads the schedule.
#include <span>
#include <string>

#include "broker/store/round.hpp"
#include "broker/store/redis_client.hpp"

namespace dueq::broker {

namespace calls {
// migrate_schedule.lua: how many of `ids` it moved.
Command migrate_schedule(const std::string& queue, const std::vector<std::string>& ids);
Result<int64_t> parse_migrate_schedule(const redisReply* reply);
}  // namespace calls

// Builds the schedule filter of a store written before it existed (the
// schedule holds jobs but there is no chunk of the filter), or when the
// filter was one string (earlier versions; then dropped); true if it did. An enqueue
// trusts the filter, so this runs before any.
Result<bool> build_missing_schedule_filter(RedisClient& redis, const std::string& queue);
// Moves the jobs of a schedule written before the partitioned schedule (one
// sorted set) into it, 500 per call; returns how many moved.
Result<int64_t> migrate_legacy_schedule(RedisClient& redis, const std::string& queue);

// At take-over, many queues are asked in one round trip whether an upgrade
// above is due (on a store this version wrote, never): these commands per
// queue, their replies read by upgrade_due, and upgrade_queue runs both
// upgrades for a queue where it is.
inline constexpr size_t kUpgradeProbeCommands = 4;
void add_upgrade_probe(std::vector<Command>& commands, const std::string& queue);
Result<bool> upgrade_due(std::span<const ReplyPtr> replies);
Result<void> upgrade_queue(RedisClient& redis, const std::string& queue);

// Stores written before 0.5 keep the set of known queues under
// kLegacyQueuesKey, in no queue's slot; its names are added to kQueuesKey
// and it is deleted (two steps behind a Redis Cluster, where the keys are
// in different slots: a broker stopped between them moves the same names
// again). Returns how many names it held.
Result<size_t> move_legacy_queue_set(RedisClient& redis);

}  // namespace dueq::broker
