#include "broker/auditor.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace dueq::broker {

namespace {

constexpr int64_t kSlice = 200;  // ids per audit.lua call
constexpr uint32_t kPartitionsPerRead = 256;

Result<AuditSlice> check_slice(Store& store, const std::string& queue, const std::vector<std::string>& ids) {
  Round round;
  round.audit(queue, ids);
  auto replies = store.execute(round);
  if (!replies) return std::unexpected(replies.error());
  return Store::parse_audit((*replies)[0].get());
}

}  // namespace

Result<AuditReport> audit_queue(Store& store, const std::string& queue, bool repair) {
  AuditReport report;
  report.queue = queue;
  auto first = check_slice(store, queue, {});
  if (!first) return std::unexpected(first.error());
  report.counts = first->counts;

  std::set<std::pair<std::string, std::string>> problems;
  auto check = [&](const std::vector<std::string>& ids) -> Result<void> {
    if (ids.empty()) return {};
    auto slice = check_slice(store, queue, ids);
    if (!slice) return std::unexpected(slice.error());
    problems.insert(slice->problems.begin(), slice->problems.end());
    return {};
  };

  auto check_all = [&](const std::vector<std::string>& ids) -> Result<void> {
    for (size_t i = 0; i < ids.size(); i += kSlice)
      if (auto ok = check(std::vector<std::string>(ids.begin() + i, ids.begin() + std::min(ids.size(), i + kSlice)));
          !ok)
        return ok;
    return {};
  };

  const QueueKeys keys(queue);
  std::string cursor = "0";
  do {
    auto step = store.scan_hash_ids(keys.jobs, cursor);
    if (!step) return std::unexpected(step.error());
    cursor = step->first;
    if (auto ok = check_all(step->second); !ok) return std::unexpected(ok.error());
  } while (cursor != "0");

  // Every schedule partition, empty or not (a record left in a partition the
  // index no longer names would otherwise go unseen): its ids and its
  // records' ids, kPartitionsPerRead partitions per round trip.
  for (uint32_t first = 0; first < kSchedulePartitions; first += kPartitionsPerRead) {
    Round round;
    for (uint32_t p = first; p < std::min(kSchedulePartitions, first + kPartitionsPerRead); ++p) {
      round.command(Command{"ZRANGE", keys.schedule_partition_key(p), "0", "-1"});
      round.command(Command{"HKEYS", keys.schedule_jobs_key(p)});
    }
    auto replies = store.execute(round);
    if (!replies) return std::unexpected(replies.error());
    std::vector<std::string> ids;
    for (const auto& reply : *replies) {
      auto some = Store::parse_strings(reply.get());
      if (!some) return std::unexpected(some.error());
      ids.insert(ids.end(), some->begin(), some->end());
    }
    // A healthy scheduled job is listed twice: by its sorted set and its hash.
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (auto ok = check_all(ids); !ok) return std::unexpected(ok.error());
  }

  // The schedule filter: a counter below its bucket's ids would let an
  // enqueue miss a scheduled duplicate. Repair makes each one exact.
  auto wrong = store.check_schedule_filter(queue, keys.schedule_filter, repair);
  if (!wrong) return std::unexpected(wrong.error());
  for (const auto& b : *wrong) {
    const std::string bucket = fmt::format("schedule filter {}:{}", b.partition, b.tail);
    if (repair) report.repaired.push_back(bucket);
    else report.problems.emplace_back(bucket, fmt::format("counter {} for {} scheduled ids", b.counter, b.ids));
  }

  for (const auto& key : {keys.ready, keys.leased, keys.dead}) {
    for (int64_t start = 0;; start += kSlice) {
      auto ids = store.range_ids(key, start, kSlice);
      if (!ids) return std::unexpected(ids.error());
      if (auto ok = check(*ids); !ok) return std::unexpected(ok.error());
      if (static_cast<int64_t>(ids->size()) < kSlice) break;
    }
  }

  std::vector<std::string> dangling;
  for (const auto& [id, what] : problems) {
    if (repair && what.find("no job record") != std::string::npos) dangling.push_back(id);
    else report.problems.emplace_back(id, what);
  }
  for (size_t i = 0; i < dangling.size(); i += kSlice) {
    Round round;
    round.repair(queue, std::vector<std::string>(dangling.begin() + i,
                                                 dangling.begin() + std::min<size_t>(dangling.size(), i + kSlice)));
    auto replies = store.execute(round);
    if (!replies) return std::unexpected(replies.error());
    auto removed = Store::parse_strings((*replies)[0].get());
    if (!removed) return std::unexpected(removed.error());
    report.repaired.insert(report.repaired.end(), removed->begin(), removed->end());
  }
  if (!report.repaired.empty()) {
    // The counts read before the repair included the dangling entries.
    auto after = check_slice(store, queue, {});
    if (!after) return std::unexpected(after.error());
    report.counts = after->counts;
  }
  return report;
}

}  // namespace dueq::broker
