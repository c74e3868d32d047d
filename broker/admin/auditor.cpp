#include "broker/admin/auditor.hpp"

#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/format.h>

#include "broker/store/encoding_pin.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

namespace {

// A flow round that reaches Redis behind an admin step waits for all of it:
// steps are kept near 0.3 ms so that enqueue-to-start p99 stays within 2x
// during an audit (make bench SCENARIO=audit).
constexpr int64_t kSlice = 50;  // ids per audit.lua call
// About 20 µs of Redis per partition at a million scheduled jobs in one
// queue (its ids and its 100 counters; 4 µs when empty): 16 keep a
// filter_check call near 0.3 ms, so the event loop's rounds barely wait
// behind it.
constexpr uint32_t kFilterPartitionsPerCall = 16;
constexpr uint32_t kFilterPartitionsPerSet = 256;  // filter_check "set" takes at most 256
// audit_schedule steps read about this many ids each, and at most
// kMaxPartitionsPerScheduleStep partitions (about 5 µs each when empty).
constexpr int64_t kIdsPerScheduleStep = 64;
constexpr int64_t kMaxPartitionsPerScheduleStep = 64;

// Ids each followed by their schedule partition, as audit, repair and
// migrate_schedule take them.
Command& add_ids_with_partitions(Command& call, const std::vector<std::string>& ids) {
  for (const auto& id : ids) call.add(id).add(static_cast<int64_t>(schedule_partition(id)));
  return call;
}

Result<AuditSlice> check_slice(RedisClient& redis, const std::string& queue, const std::vector<std::string>& ids) {
  auto r = redis.call(calls::audit(queue, ids));
  if (!r) return std::unexpected(r.error());
  return calls::parse_audit(r->get());
}

// One step of a cursor walk (ZSCAN, scan_ids.lua): [next cursor, [entries]].
struct ScanStep {
  std::string cursor;
  std::vector<std::string> entries;
};
Result<ScanStep> parse_scan_step(const redisReply* step, const char* what) {
  if (step->type != REDIS_REPLY_ARRAY || step->elements != 2 || step->element[1]->type != REDIS_REPLY_ARRAY)
    return reply::bad(step, what);
  auto entries = reply::strings(step->element[1], what);
  if (!entries) return std::unexpected(entries.error());
  return ScanStep{reply::str(step->element[0]), std::move(*entries)};
}

}  // namespace

namespace calls {

Command audit(const std::string& queue, const std::vector<std::string>& ids) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::audit, {k.schedule, k.ready, k.leased, k.dead, k.stats, k.jobs});
  return add_ids_with_partitions(call, ids);
}

Result<AuditSlice> parse_audit(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_ARRAY ||
      (r->element[0]->elements != 8 && r->element[0]->elements != 0) || r->element[1]->type != REDIS_REPLY_ARRAY)
    return reply::bad(r, "audit");
  AuditSlice slice;
  auto c = [&](size_t i) { return reply::num(r->element[0]->element[i]); };
  if (r->element[0]->elements == 8) slice.counts = AuditCounts{c(0), c(1), c(2), c(3), c(4), c(5), c(6), c(7)};
  const redisReply* p = r->element[1];
  for (size_t i = 0; i + 1 < p->elements; i += 2)
    slice.problems.emplace_back(reply::str(p->element[i]), reply::str(p->element[i + 1]));
  return slice;
}

Command repair(const std::string& queue, const std::vector<std::string>& ids) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::repair, {k.schedule, k.ready, k.leased, k.dead, k.jobs, k.stats});
  return add_ids_with_partitions(call, ids);
}

Command filter_check(const std::string& queue, const std::string& filter_key, bool set,
                     const std::vector<uint32_t>& partitions) {
  Command call = script_call(lua::ScriptId::filter_check, {QueueKeys(queue).schedule, filter_key});
  call.add(set ? "set" : "check");
  for (uint32_t p : partitions) call.add(static_cast<int64_t>(p));
  return call;
}

Result<std::vector<FilterBucket>> parse_filter_check(const redisReply* r) {
  auto values = reply::integers(r, "filter_check");
  if (!values) return std::unexpected(values.error());
  if (values->size() % 4 != 0) return reply::bad(r, "filter_check");
  std::vector<FilterBucket> out;
  for (size_t i = 0; i < values->size(); i += 4)
    out.push_back({(*values)[i], (*values)[i + 1], (*values)[i + 2], (*values)[i + 3]});
  return out;
}

Command audit_schedule(const std::string& queue, uint32_t first, uint32_t count) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::audit_schedule, {k.schedule, k.schedule_filter})
      .add(static_cast<int64_t>(first))
      .add(static_cast<int64_t>(count));
}

Result<ScheduleStep> parse_audit_schedule(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 4) return reply::bad(r, "audit_schedule");
  auto ids = reply::strings(r->element[0], "audit_schedule");
  if (!ids) return std::unexpected(ids.error());
  auto wrong = parse_filter_check(r->element[1]);
  if (!wrong) return std::unexpected(wrong.error());
  auto unindexed = reply::integers(r->element[2], "audit_schedule");
  if (!unindexed || unindexed->size() % 2 != 0) return reply::bad(r, "audit_schedule");
  auto untyped = reply::strings(r->element[3], "audit_schedule");
  if (!untyped || untyped->size() % 2 != 0) return reply::bad(r, "audit_schedule");
  ScheduleStep step{std::move(*ids), std::move(*wrong), {}, {}};
  for (size_t i = 0; i < unindexed->size(); i += 2)
    step.unindexed.push_back({static_cast<uint32_t>((*unindexed)[i]), (*unindexed)[i + 1]});
  for (size_t i = 0; i < untyped->size(); i += 2) {
    uint32_t partition = 0;
    const auto& text = (*untyped)[i];
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), partition);
    if (ec != std::errc{} || end != text.data() + text.size() || partition >= kSchedulePartitions)
      return reply::bad(r, "audit_schedule");
    step.untyped.push_back({partition, std::move((*untyped)[i + 1])});
  }
  return step;
}

Command scan_ids(const std::string& hash_key, const std::string& cursor, int count) {
  return script_call(lua::ScriptId::scan_ids, {hash_key}).add(cursor).add(count);
}

}  // namespace calls

Result<std::vector<FilterBucket>> check_schedule_filter(RedisClient& redis, const std::string& queue,
                                                        const std::string& filter_key, bool set) {
  std::vector<FilterBucket> wrong;
  for (uint32_t first = 0; first < kSchedulePartitions; first += kFilterPartitionsPerCall) {
    std::vector<uint32_t> partitions;
    for (uint32_t p = first; p < std::min(kSchedulePartitions, first + kFilterPartitionsPerCall); ++p) partitions.push_back(p);
    auto r = redis.call(calls::filter_check(queue, filter_key, set, partitions));
    if (!r) return std::unexpected(r.error());
    auto some = calls::parse_filter_check(r->get());
    if (!some) return std::unexpected(some.error());
    wrong.insert(wrong.end(), some->begin(), some->end());
  }
  return wrong;
}

Result<void> walk_state_set(RedisClient& redis, const std::string& key, int64_t count_hint,
                            const std::function<Result<void>(const std::vector<std::string>&)>& visit) {
  std::string cursor = "0";
  do {
    auto r = redis.call(Command{"ZSCAN", key, cursor, "COUNT", std::to_string(count_hint)});
    if (!r) return std::unexpected(r.error());
    auto step = parse_scan_step(r->get(), "ZSCAN");  // members and scores
    if (!step) return std::unexpected(step.error());
    std::vector<std::string> ids;
    for (size_t i = 0; i < step->entries.size(); i += 2)
      if (!is_encoding_pin(step->entries[i])) ids.push_back(std::move(step->entries[i]));
    cursor = std::move(step->cursor);
    if (auto ok = visit(ids); !ok) return ok;
  } while (cursor != "0");
  return {};
}

namespace {

// One queue's audit (audit_queue): every job record, every schedule
// partition and every state set, checked by audit.lua in slices; with
// `repair`, what can safely be fixed is fixed.
class QueueAudit {
 public:
  QueueAudit(RedisClient& redis, const std::string& queue, bool repair)
      : redis_(redis), queue_(queue), keys_(queue), repair_(repair) {
    report_.queue = queue;
  }

  Result<AuditReport> run() {
    if (auto ok = recount(); !ok) return std::unexpected(ok.error());
    if (auto ok = check_job_records(); !ok) return std::unexpected(ok.error());
    if (auto ok = check_schedule(); !ok) return std::unexpected(ok.error());
    if (auto ok = settle_filter(); !ok) return std::unexpected(ok.error());
    if (auto ok = settle_index(); !ok) return std::unexpected(ok.error());
    if (auto ok = settle_type_index(); !ok) return std::unexpected(ok.error());
    for (const auto& key : {keys_.ready, keys_.leased, keys_.dead})
      if (auto ok = walk_state_set(redis_, key, kSlice, [this](const auto& ids) { return check_all(ids); }); !ok)
        return std::unexpected(ok.error());
    if (auto ok = settle_dangling(); !ok) return std::unexpected(ok.error());
    // The counts read before a repair included what it removed.
    if (!report_.repaired.empty())
      if (auto ok = recount(); !ok) return std::unexpected(ok.error());
    return std::move(report_);
  }

 private:
  Result<void> recount() {
    auto slice = check_slice(redis_, queue_, {});
    if (!slice) return std::unexpected(slice.error());
    report_.counts = slice->counts;
    return {};
  }

  // `ids` in audit.lua slices of kSlice.
  Result<void> check_all(const std::vector<std::string>& ids) {
    for (size_t i = 0; i < ids.size(); i += kSlice) {
      auto slice = check_slice(redis_, queue_, {ids.begin() + i, ids.begin() + std::min(ids.size(), i + kSlice)});
      if (!slice) return std::unexpected(slice.error());
      problems_.insert(slice->problems.begin(), slice->problems.end());
    }
    return {};
  }

  Result<void> check_job_records() {
    std::string cursor = "0";
    do {
      auto r = redis_.call(calls::scan_ids(keys_.jobs, cursor, 1000));
      if (!r) return std::unexpected(r.error());
      auto step = parse_scan_step(r->get(), "scan_ids");
      if (!step) return std::unexpected(step.error());
      cursor = std::move(step->cursor);
      if (auto ok = check_all(step->entries); !ok) return ok;
    } while (cursor != "0");
    return {};
  }

  // Every schedule partition, empty or not (a record left in a partition the
  // index no longer names would otherwise go unseen): its ids, checked like
  // the others, and its filter counters. A step covers the partitions that
  // hold about kIdsPerScheduleStep ids at the queue's scheduled count, and
  // at most kMaxPartitionsPerScheduleStep.
  Result<void> check_schedule() {
    const int64_t per_partition = report_.counts.scheduled / kSchedulePartitions + 1;
    const auto per_step = static_cast<uint32_t>(
        std::clamp<int64_t>(kIdsPerScheduleStep / per_partition, 4, kMaxPartitionsPerScheduleStep));
    std::vector<std::string> unchecked;  // gathered over steps into full audit.lua slices
    for (uint32_t first = 0; first < kSchedulePartitions; first += per_step) {
      const uint32_t count = std::min(per_step, kSchedulePartitions - first);
      auto r = redis_.call(calls::audit_schedule(queue_, first, count));
      if (!r) return std::unexpected(r.error());
      auto step = calls::parse_audit_schedule(r->get());
      if (!step) return std::unexpected(step.error());
      wrong_.insert(wrong_.end(), step->wrong.begin(), step->wrong.end());
      unindexed_.insert(unindexed_.end(), step->unindexed.begin(), step->unindexed.end());
      untyped_.insert(untyped_.end(), std::make_move_iterator(step->untyped.begin()), std::make_move_iterator(step->untyped.end()));
      unchecked.insert(unchecked.end(), std::make_move_iterator(step->ids.begin()), std::make_move_iterator(step->ids.end()));
      const bool last = first + count == kSchedulePartitions;
      if (static_cast<int64_t>(unchecked.size()) < kSlice && !last) continue;
      const size_t full = last ? unchecked.size() : unchecked.size() - unchecked.size() % kSlice;
      if (auto ok = check_all({unchecked.begin(), unchecked.begin() + static_cast<std::ptrdiff_t>(full)}); !ok) return ok;
      unchecked.erase(unchecked.begin(), unchecked.begin() + static_cast<std::ptrdiff_t>(full));
    }
    return {};
  }

  // The schedule filter: a counter below its bucket's ids would let an
  // enqueue miss a scheduled duplicate. Repair makes each one exact.
  Result<void> settle_filter() {
    if (repair_ && !wrong_.empty()) {
      std::vector<uint32_t> partitions;
      for (const auto& b : wrong_)
        if (partitions.empty() || partitions.back() != static_cast<uint32_t>(b.partition))
          partitions.push_back(static_cast<uint32_t>(b.partition));
      wrong_.clear();
      for (size_t i = 0; i < partitions.size(); i += kFilterPartitionsPerSet) {
        const std::vector<uint32_t> some(partitions.begin() + static_cast<std::ptrdiff_t>(i),
                                         partitions.begin() + static_cast<std::ptrdiff_t>(std::min(partitions.size(), i + kFilterPartitionsPerSet)));
        auto r = redis_.call(calls::filter_check(queue_, keys_.schedule_filter, true, some));
        if (!r) return std::unexpected(r.error());
        auto set = calls::parse_filter_check(r->get());
        if (!set) return std::unexpected(set.error());
        wrong_.insert(wrong_.end(), set->begin(), set->end());
      }
    }
    for (const auto& b : wrong_) {
      const std::string bucket = fmt::format("schedule filter {}:{}", b.partition, b.tail);
      if (repair_) report_.repaired.push_back(bucket);
      else report_.problems.emplace_back(bucket, fmt::format("counter {} for {} scheduled ids", b.counter, b.ids));
    }
    return {};
  }

  // The schedule index: a partition it does not name by its earliest due
  // time is never promoted. LT only lowers an entry (promote may have moved
  // it meanwhile) and adds a missing one; an entry for a partition emptied
  // since is harmless (promote drops it).
  Result<void> settle_index() {
    for (const auto& u : unindexed_) {
      const std::string partition = fmt::format("schedule partition {}", u.partition);
      if (!repair_) {
        report_.problems.emplace_back(partition, fmt::format("holds jobs due from {} ms that the schedule index does "
                                                             "not name by then (they would never be promoted)",
                                                             u.earliest_due_ms));
        continue;
      }
      auto r = redis_.call(
          Command{"ZADD", keys_.schedule, "LT", std::to_string(u.earliest_due_ms), std::to_string(u.partition)});
      if (!r) return std::unexpected(r.error());
      if (auto err = reply_error(r->get()); !err.empty())
        return fail(Errc::internal, "repairing the schedule index: " + std::string(err));
      report_.repaired.push_back(partition);
    }
    return {};
  }

  // The type index: a partition its type's bitmap does not name is skipped
  // by a search by that type. Repair sets the bit (a bit too many only
  // costs a search a look).
  Result<void> settle_type_index() {
    for (const auto& u : untyped_) {
      const std::string partition = fmt::format("schedule partition {}", u.partition);
      if (!repair_) {
        report_.problems.emplace_back(partition, "holds jobs of type '" + loggable(u.type, 64) +
                                                     "' that the type index does not name (a search by that type would skip them)");
        continue;
      }
      auto r = redis_.call(Command{"BITFIELD", keys_.schedule + ":type:" + u.type, "SET", "u1", std::to_string(u.partition), "1"});
      if (!r) return std::unexpected(r.error());
      if (auto err = reply_error(r->get()); !err.empty())
        return fail(Errc::internal, "repairing the type index: " + std::string(err));
      report_.repaired.push_back(partition + " type " + loggable(u.type, 64));
    }
    return {};
  }

  // Entries whose job record is gone: removed with repair (they can never
  // be delivered), else reported with the other problems.
  Result<void> settle_dangling() {
    std::vector<std::string> dangling;
    for (const auto& [id, what] : problems_) {
      if (repair_ && what.find("no job record") != std::string::npos) dangling.push_back(id);
      else report_.problems.emplace_back(id, what);
    }
    for (size_t i = 0; i < dangling.size(); i += kSlice) {
      auto r = redis_.call(calls::repair(queue_, {dangling.begin() + static_cast<std::ptrdiff_t>(i),
                                                  dangling.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(dangling.size(), i + kSlice))}));
      if (!r) return std::unexpected(r.error());
      auto removed = reply::strings(r->get(), "repair");
      if (!removed) return std::unexpected(removed.error());
      report_.repaired.insert(report_.repaired.end(), removed->begin(), removed->end());
    }
    return {};
  }

  RedisClient& redis_;
  const std::string& queue_;
  const QueueKeys keys_;
  const bool repair_;
  AuditReport report_;
  std::set<std::pair<std::string, std::string>> problems_;  // (id, what) found by audit.lua
  std::vector<FilterBucket> wrong_;
  std::vector<UnindexedPartition> unindexed_;
  std::vector<UntypedPartition> untyped_;
};

}  // namespace

Result<AuditReport> audit_queue(RedisClient& redis, const std::string& queue, bool repair) {
  return QueueAudit(redis, queue, repair).run();
}

}  // namespace dueq::broker
