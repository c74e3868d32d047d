// Broker's take-over: what a broker that has just won the leader lease does
// before it serves (broker/broker.hpp). It runs before the loop, so the
// lease is renewed here between round trips: a store with many queues
// behind a slow link may take longer than a lease to prepare, and a lease
// lost meanwhile would hand the store to a standby that starts over too.
// Each step asks first, with plain reads pipelined for a thousand queues,
// and runs a script only for the queues that need it: a script costs Redis
// about 20 us, a read 1 to 5.
#include <spdlog/spdlog.h>

#include "broker/broker.hpp"
#include "broker/loop/enqueuer.hpp"
#include "broker/admin/job_lookup.hpp"
#include "broker/store/keys.hpp"
#include "broker/admin/store_upgrade.hpp"
#include "common/names.hpp"

namespace dueq::broker {

namespace {

// What one queue needs before the broker serves it.
struct QueueNeeds {
  bool upgrade = false;  // store_upgrade.hpp
  bool pins = false;     // one of its jobs, tokens and leased keys is missing (pin_encoding.lua)
  bool align = false;    // it has leases of the previous leader (align_leases.lua)
};

constexpr size_t kProbeCommands = kUpgradeProbeCommands + 2;

void add_probe(std::vector<Command>& commands, const std::string& queue) {
  add_upgrade_probe(commands, queue);
  const QueueKeys keys(queue);
  // A key that exists has its pin: the pins go in when a queue is first
  // registered and at every take-over, and they keep the key from going
  // away when its jobs do.
  commands.push_back(Command{"EXISTS", keys.jobs, keys.tokens, keys.leased});
  // Leases other than at the grace deadline already; the pin's deadline is
  // +inf: "(+inf" leaves it out.
  commands.push_back(Command{"ZCOUNT", keys.leased, "-inf", "(+inf"});
}

Result<QueueNeeds> needs_of(std::span<const ReplyPtr> replies) {
  auto upgrade = upgrade_due(replies.first(kUpgradeProbeCommands));
  if (!upgrade) return std::unexpected(upgrade.error());
  const redisReply* keys = replies[kUpgradeProbeCommands].get();
  const redisReply* leases = replies[kUpgradeProbeCommands + 1].get();
  if (keys->type != REDIS_REPLY_INTEGER) return reply::bad(keys, "EXISTS");
  if (leases->type != REDIS_REPLY_INTEGER) return reply::bad(leases, "ZCOUNT");
  return QueueNeeds{*upgrade, keys->integer < 3, leases->integer > 0};
}

}  // namespace

Result<void> Broker::take_over(size_t pin_bytes) {
  redis_.set_epoch(leadership_.epoch());
  if (auto ok = set_lease_clock(); !ok) return std::unexpected(ok.error());
  if (auto moved = move_legacy_queue_set(redis_); !moved) return std::unexpected(moved.error());
  auto known = known_queues(redis_);
  if (!known) return std::unexpected(known.error());
  std::vector<std::string> names;
  for (auto& name : *known) {
    if (!validate_queue_name(name)) continue;
    queues_.get(name).registered = true;
    names.push_back(std::move(name));
  }
  queues_.forget_times();
  const int64_t began_ms = clock_.steady_ms();
  for (size_t i = 0; i < names.size(); i += kQueuesPerRoundTrip) {
    if (auto ok = leadership_.renew_while_taking_over(redis_); !ok) return std::unexpected(ok.error());
    const auto chunk = std::span<const std::string>(names).subspan(i, std::min(kQueuesPerRoundTrip, names.size() - i));
    if (auto ok = prepare_queues(chunk, pin_bytes); !ok) return std::unexpected(ok.error());
  }
  spdlog::info("took over {} queues in {} ms", names.size(), clock_.steady_ms() - began_ms);
  if (auto ok = cron_.load(redis_); !ok) return std::unexpected(ok.error());
  return leadership_.renew_while_taking_over(redis_);
}

Result<void> Broker::prepare_queues(std::span<const std::string> names, size_t pin_bytes) {
  // Outside a Cluster every script checks the leader's epoch counter too
  // (lib/fence.lua), which fences the previous leader out of every queue
  // at once; behind one, each queue's epoch is raised first.
  if (address_.via_cluster())
    if (auto ok = leadership_.fence_queues(redis_, names); !ok) return std::unexpected(ok.error());
  const int64_t grace_ms = scheduler_.grace_deadline();
  std::vector<Command> probe;
  probe.reserve(names.size() * kProbeCommands);
  for (const auto& name : names) add_probe(probe, name);
  auto replies = redis_.pipeline(std::move(probe));
  if (!replies) return std::unexpected(replies.error());
  std::vector<Command> pins;
  std::vector<std::string> to_align;
  for (size_t q = 0; q < names.size(); ++q) {
    auto needs = needs_of(std::span<const ReplyPtr>(*replies).subspan(q * kProbeCommands, kProbeCommands));
    if (!needs) return std::unexpected(needs.error());
    if (needs->upgrade)
      if (auto ok = upgrade_queue(redis_, names[q]); !ok) return std::unexpected(ok.error());
    if (needs->pins) pins.push_back(calls::pin_encoding(names[q], pin_bytes));
    if (needs->align) to_align.push_back(names[q]);
  }
  if (!pins.empty()) {
    auto pinned = redis_.pipeline(std::move(pins));
    if (!pinned) return std::unexpected(pinned.error());
    for (const auto& r : *pinned)
      if (auto err = reply_error(r.get()); !err.empty()) return fail(Errc::internal, fmt::format("pinning the key encodings: {}", err));
  }
  return scheduler_.align_previous_leases(redis_, to_align, grace_ms);
}

}  // namespace dueq::broker
