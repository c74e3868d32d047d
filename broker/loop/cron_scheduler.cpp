#include "broker/loop/cron_scheduler.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "broker/store/job_record.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"

namespace dueq::broker {

namespace calls {

Command cron_tick(const CronEntry& entry, const std::vector<int64_t>& ticks, int64_t now_ms, uint32_t default_max_attempts) {
  const QueueKeys k(entry.queue);
  Command call = script_call(lua::ScriptId::cron_tick, {k.cron, k.schedule, k.ready, k.jobs, k.stats, k.done, k.cancelled});
  call.add(entry.name).add(entry.fingerprint()).add(now_ms).add(static_cast<int64_t>(ticks.size()));
  const uint64_t checksum = proto::payload_checksum(entry.payload);
  for (const int64_t tick : ticks) {
    const std::string id = cron_tick_id(entry.name, tick);
    const uint32_t max_attempts = entry.max_attempts > 0 ? entry.max_attempts : default_max_attempts;
    call.add(tick).add(id)
        .add(encode_job_record(JobRecord{entry.type, entry.payload, tick, max_attempts, now_ms, 0, 0, checksum}))
        .add(static_cast<int64_t>(schedule_partition(id)));
  }
  return call;
}

Result<CronTickOutcome> parse_cron_tick(const redisReply* r) {
  auto v = reply::integers(r, "cron_tick");
  if (!v || v->size() != 2) return reply::bad(r, "cron_tick");
  return CronTickOutcome{(*v)[0], (*v)[1]};
}

}  // namespace calls

Result<std::vector<CronEntry>> load_stored_cron_entries(RedisClient& redis, std::vector<std::string>& problems) {
  auto r = redis.call(Command{"HGETALL", kCronEntriesKey});
  if (!r) return std::unexpected(r.error());
  auto pairs = reply::strings(r->get(), "HGETALL");
  if (!pairs) return std::unexpected(pairs.error());
  std::vector<CronEntry> out;
  for (size_t i = 0; i + 1 < pairs->size(); i += 2) {
    auto entry = CronEntry::from_json((*pairs)[i], (*pairs)[i + 1]);
    if (entry) out.push_back(std::move(*entry));
    else problems.push_back(entry.error().message);
  }
  return out;
}

Result<std::optional<int64_t>> read_cron_state(RedisClient& redis, const CronEntry& entry) {
  auto r = redis.call(Command{"HGET", QueueKeys(entry.queue).cron, entry.name});
  if (!r) return std::unexpected(r.error());
  if ((*r)->type == REDIS_REPLY_NIL) return std::optional<int64_t>(0);
  const std::string state = reply::str(r->get());
  const size_t colon = state.find(':');
  if (colon == std::string::npos || state.substr(colon + 1) != entry.fingerprint()) return std::optional<int64_t>();
  return std::optional<int64_t>(std::stoll(state.substr(0, colon)));
}

Result<void> CronScheduler::load(RedisClient& redis) {
  entries_.clear();
  std::vector<std::string> problems;
  auto stored = load_stored_cron_entries(redis, problems);
  if (!stored) return std::unexpected(stored.error());
  for (const auto& problem : problems) spdlog::error("{}: it is skipped", problem);
  std::vector<CronEntry> all(config_.cron.begin(), config_.cron.end());
  for (auto& entry : *stored) {
    if (std::any_of(all.begin(), all.end(), [&](const CronEntry& e) { return e.name == entry.name; })) {
      spdlog::warn("cron entry '{}' is in the config file and was added with dueq cron add: the config file's is used", entry.name);
      continue;
    }
    all.push_back(std::move(entry));
  }
  for (auto& entry : all) {
    if (entries_.size() >= kMaxCronEntries) {
      spdlog::error("more than {} cron entries: '{}' and later ones are skipped", kMaxCronEntries, entry.name);
      break;
    }
    auto last = read_cron_state(redis, entry);
    if (!last) return std::unexpected(last.error());
    if (!*last) {
      // Its definition changed since its last tick was enqueued (the config
      // file was edited): it starts afresh; ticks already enqueued for the
      // old definition (at most the lookahead) still run.
      spdlog::info("cron entry '{}' changed: its ticks start afresh", entry.name);
      auto reset = redis.call(Command{"HSET", QueueKeys(entry.queue).cron, entry.name, "0:" + entry.fingerprint()});
      if (!reset) return std::unexpected(reset.error());
    }
    const std::string name = entry.name;
    entries_.insert_or_assign(name, Tracked{std::move(entry), last->value_or(0), 0, false});
  }
  if (!entries_.empty()) spdlog::info("{} cron entries", entries_.size());
  return {};
}

void CronScheduler::put(CronEntry entry, int64_t last_ms) {
  const std::string name = entry.name;
  entries_.insert_or_assign(name, Tracked{std::move(entry), last_ms, 0, false});
}

void CronScheduler::remove(const std::string& name) { entries_.erase(name); }

std::vector<int64_t> CronScheduler::due_ticks(Tracked& t, int64_t now_ms) {
  const CronSchedule& schedule = t.entry.schedule;
  std::vector<int64_t> ticks;
  int64_t from = t.last_ms > 0 ? t.last_ms : now_ms;
  // Ticks that passed while no broker led, past the grace: the misfire
  // policy decides. Counted up to a bound (an every-second entry after a
  // day away).
  if (t.last_ms > 0) {
    const int64_t past_on_both_ms = std::min(now_ms, store_clock_.now_ms()) - kMisfireGraceMs;
    int64_t latest_missed = -1, missed = 0;
    for (auto next = schedule.next_after(from); next && *next <= past_on_both_ms && missed < 100'000;
         next = schedule.next_after(*next)) {
      latest_missed = *next;
      ++missed;
    }
    if (missed > 0) {
      spdlog::warn("cron entry '{}': {}{} ticks passed while no broker led; {}", t.entry.name, missed >= 100'000 ? "over " : "",
                   missed, t.entry.run_missed_once ? "the latest runs now (misfire run_once)" : "skipped (misfire skip)");
      if (t.entry.run_missed_once) ticks.push_back(latest_missed);
      from = latest_missed;
    }
  }
  // Every tick within the lookahead, and the next one at least.
  bool future_known = t.last_ms > now_ms;
  for (auto next = schedule.next_after(from); next && ticks.size() < kMaxTicksPerCall; next = schedule.next_after(*next)) {
    if (*next > now_ms + config_.cron_lookahead_ms && future_known) break;
    ticks.push_back(*next);
    future_known = future_known || *next > now_ms;
  }
  const int64_t newest = ticks.empty() ? t.last_ms : ticks.back();
  const auto after_newest = schedule.next_after(std::max(newest, now_ms));
  t.next_check_ms = after_newest ? std::max(now_ms + 100, *after_newest - config_.cron_lookahead_ms) : INT64_MAX;
  return ticks;
}

void CronScheduler::add_to(Round& round) {
  const int64_t now_ms = clock_.wall_ms();
  for (auto& [name, t] : entries_) {
    if (t.in_flight || t.next_check_ms > now_ms) continue;
    std::vector<int64_t> ticks = due_ticks(t, now_ms);
    if (ticks.empty()) continue;
    if (queues_.find(t.entry.queue) == nullptr && queues_.size() >= static_cast<size_t>(config_.max_queues)) {
      spdlog::error("cron entry '{}': queue '{}' would pass max_queues ({}); not enqueued", name, t.entry.queue, config_.max_queues);
      t.next_check_ms = now_ms + 60'000;
      continue;
    }
    QueueState& queue = queues_.get(t.entry.queue);
    if (!enqueuer_.ready_for_writes(round, queue)) {
      // Behind a Redis Cluster a new queue's registration goes first; its
      // ticks follow once Redis confirmed it (one round trip).
      t.next_check_ms = now_ms + kRegistrationWaitMs;
      continue;
    }
    // Hints for the promote and lease calls that follow in this round.
    for (const int64_t tick : ticks) {
      if (tick <= now_ms) queue.ready_this_round = true;
      else queue.next_due_ms = earliest_known(queue.next_due_ms, tick);
    }
    t.in_flight = true;
    round.add(calls::cron_tick(t.entry, ticks, now_ms, config_.policy(t.entry.queue).max_attempts),
              [this, name = name, fingerprint = t.entry.fingerprint()](const redisReply* r) {
                auto it = entries_.find(name);
                if (it == entries_.end() || it->second.entry.fingerprint() != fingerprint) return;  // removed or changed meanwhile
                Tracked& tracked = it->second;
                tracked.in_flight = false;
                auto outcome = r == nullptr ? Result<calls::CronTickOutcome>(fail(Errc::unavailable, "round failed"))
                                            : calls::parse_cron_tick(r);
                if (!outcome) {
                  tracked.next_check_ms = clock_.wall_ms() + 1'000;  // tried again; each tick is still enqueued once
                  if (r != nullptr) spdlog::error("cron entry '{}': {}", name, outcome.error().message);
                  return;
                }
                if (outcome->enqueued < 0) {
                  // `dueq cron add` or `remove` changed it in Redis; the
                  // admin thread's answer brings the new definition.
                  tracked.next_check_ms = clock_.wall_ms() + 5'000;
                  return;
                }
                tracked.last_ms = outcome->last_ms;
                queues_.get(tracked.entry.queue).registered = true;
              });
  }
}

int64_t CronScheduler::us_until_next(int64_t wall_ms_now) const {
  int64_t earliest = -1;
  for (const auto& [name, t] : entries_)
    if (!t.in_flight && t.next_check_ms != INT64_MAX) earliest = earliest_known(earliest, t.next_check_ms);
  return earliest < 0 ? -1 : std::max<int64_t>(0, earliest - wall_ms_now) * 1000;
}

std::vector<CronScheduler::Upcoming> CronScheduler::upcoming(int64_t wall_ms_now) const {
  std::vector<Upcoming> out;
  for (const auto& [name, t] : entries_) {
    const auto next = t.entry.schedule.next_after(wall_ms_now);
    out.push_back({name, t.entry.queue, t.entry.schedule.expression(), t.entry.schedule.time_zone(), next.value_or(0)});
  }
  return out;
}

}  // namespace dueq::broker
