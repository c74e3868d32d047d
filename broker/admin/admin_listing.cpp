// The operator's listings: every queue's dead letters, a page at a time by
// a cursor, and the next jobs of one queue's schedule.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include "broker/admin/admin_commands.hpp"
#include "broker/admin/job_lookup.hpp"
#include "broker/store/keys.hpp"
#include "common/names.hpp"

namespace dueq::broker {

namespace {
constexpr int64_t kDeadListMax = 10'000;
constexpr size_t kDeadListReplyBytes = size_t{4} << 20;
}  // namespace

std::string DeadListCursor::text() const { return queue + ":" + std::to_string(rank); }

Result<DeadListCursor> DeadListCursor::parse(std::string_view text) {
  if (text.empty()) return DeadListCursor{};
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || !validate_queue_name(text.substr(0, colon)))
    return fail(Errc::bad_argument, "after: not a cursor this broker gave (the `next` of an earlier page)");
  DeadListCursor cursor{std::string(text.substr(0, colon)), 0};
  const std::string_view rank = text.substr(colon + 1);
  const auto [end, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), cursor.rank);
  if (rank.empty() || ec != std::errc() || end != rank.data() + rank.size() || cursor.rank < 0)
    return fail(Errc::bad_argument, "after: not a cursor this broker gave (the `next` of an earlier page)");
  return cursor;
}

std::map<std::string, std::string> listed_row(std::map<std::string, std::string>&& fields) {
  for (const char* big : {"p", "el"}) {
    if (auto it = fields.find(big); it != fields.end()) {
      fields[std::string(big) + "_bytes"] = std::to_string(it->second.size());
      fields.erase(it);
    }
  }
  return std::move(fields);
}

namespace {

size_t row_bytes(const std::map<std::string, std::string>& row) {
  size_t n = 0;
  for (const auto& [k, v] : row) n += k.size() + v.size() + 4;
  return n;
}

}  // namespace

namespace {

// One queue's dead letters from rank `from` into `reply`, until it holds
// `limit` rows or `bytes` passes kDeadListReplyBytes. Returns the rank to go
// on from in that queue, or nullopt when it was listed to its end.
Result<std::optional<int64_t>> list_dead_of(AdminContext& c, const std::string& name, int64_t from, int64_t limit,
                                            size_t& bytes, proto::AdminReply& reply) {
  const int64_t room = limit - static_cast<int64_t>(reply.rows.size());
  auto r = c.redis.call(Command{"ZRANGE", QueueKeys(name).dead, std::to_string(from), std::to_string(from + room - 1)});
  if (!r) return std::unexpected(r.error());
  auto ids = reply::strings(r->get(), "ZRANGE");
  if (!ids) return std::unexpected(ids.error());
  // Bounded steps: 100 lookups per round trip.
  for (size_t i = 0; i < ids->size(); i += 100) {
    std::vector<Command> shows;
    for (size_t j = i; j < std::min(ids->size(), i + 100); ++j) shows.push_back(calls::show(name, (*ids)[j]));
    auto replies = c.redis.pipeline(std::move(shows));
    if (!replies) return std::unexpected(replies.error());
    for (size_t j = 0; j < replies->size(); ++j) {
      auto row = calls::parse_show((*replies)[j].get());
      if (!row) return std::unexpected(row.error());
      if (row->empty()) continue;  // purged or replayed since the range was read
      (*row)["id"] = (*ids)[i + j];
      (*row)["queue"] = name;
      (*row)["died_ms"] = (*row)["f"];
      auto listed = listed_row(std::move(*row));
      bytes += row_bytes(listed);
      // The first row of a page always goes: a page moves on.
      if (bytes > kDeadListReplyBytes && !reply.rows.empty()) return from + static_cast<int64_t>(i + j);
      reply.rows.push_back(std::move(listed));
    }
  }
  if (static_cast<int64_t>(ids->size()) == room) return from + room;  // maybe more
  return std::nullopt;
}

}  // namespace

// At most `limit` rows in all (across queues, in name order) and
// kDeadListReplyBytes of them: a request for every queue's dead letters
// costs a bounded reply. `args["after"]` goes on where an earlier page
// stopped; the reply's `next` says where this one did ("" at the end).
Result<proto::AdminReply> list_dead(AdminContext& c, const proto::AdminRequest& request) {
  const int64_t limit = request.limit == 0 ? 1000 : std::min<int64_t>(request.limit, kDeadListMax);
  const auto after = request.args.find("after");
  auto cursor = DeadListCursor::parse(after == request.args.end() ? "" : after->second);
  if (!cursor) return std::unexpected(cursor.error());
  auto names = queues_for(c.redis, request.queue);
  if (!names) return std::unexpected(names.error());
  std::sort(names->begin(), names->end());
  proto::AdminReply reply;
  size_t bytes = 0;
  for (auto it = std::lower_bound(names->begin(), names->end(), cursor->queue); it != names->end(); ++it) {
    const int64_t from = *it == cursor->queue ? cursor->rank : 0;
    auto stopped = list_dead_of(c, *it, from, limit, bytes, reply);
    if (!stopped) return std::unexpected(stopped.error());
    if (*stopped) {
      reply.next = DeadListCursor{*it, **stopped}.text();
      reply.summary = fmt::format("{} dead jobs; more after this page (a page stops at {} rows or {} KiB)",
                                  reply.rows.size(), limit, kDeadListReplyBytes / 1024);
      break;
    }
  }
  return reply;
}

// The next `limit` (at most 100) jobs of one queue's schedule by due time.
// The schedule index holds a lower bound of each partition's earliest due
// time; partitions are read in that order, 64 a round trip, until the next
// one's bound is past the last job found (then the list is exact) or 1,024
// partitions were read (then the summary says it may not be).
Result<proto::AdminReply> list_scheduled(AdminContext& c, const proto::AdminRequest& request) {
  if (request.queue.empty()) return fail(Errc::bad_argument, "scheduled needs a queue");
  const size_t limit = request.limit == 0 ? 20 : std::min<size_t>(request.limit, 100);
  constexpr size_t kPartitionsPerStep = 64, kMaxPartitions = 1'024;
  const QueueKeys k(request.queue);
  std::vector<std::pair<int64_t, std::string>> found;  // (due ms, id), sorted, at most `limit`
  bool exact = false;
  for (size_t from = 0; from < kMaxPartitions && !exact; from += kPartitionsPerStep) {
    auto index = c.redis.call(Command{"ZRANGE", k.schedule, std::to_string(from),
                                      std::to_string(from + kPartitionsPerStep - 1), "WITHSCORES"});
    if (!index) return std::unexpected(index.error());
    auto pairs = reply::strings(index->get(), "ZRANGE");
    if (!pairs) return std::unexpected(pairs.error());
    if (pairs->empty()) {
      exact = true;
      break;
    }
    std::vector<Command> reads;
    std::vector<int64_t> bounds;
    for (size_t i = 0; i + 1 < pairs->size(); i += 2) {
      reads.push_back(Command{"ZRANGE", k.schedule + ":" + (*pairs)[i], "0", std::to_string(limit - 1), "WITHSCORES"});
      bounds.push_back(std::stoll((*pairs)[i + 1]));
    }
    auto replies = c.redis.pipeline(std::move(reads));
    if (!replies) return std::unexpected(replies.error());
    for (size_t p = 0; p < replies->size(); ++p) {
      // Every partition from here on starts at or after this bound.
      if (found.size() == limit && found.back().first <= bounds[p]) {
        exact = true;
        break;
      }
      auto jobs = reply::strings((*replies)[p].get(), "ZRANGE");
      if (!jobs) return std::unexpected(jobs.error());
      for (size_t j = 0; j + 1 < jobs->size(); j += 2) found.emplace_back(std::stoll((*jobs)[j + 1]), (*jobs)[j]);
      std::sort(found.begin(), found.end());
      if (found.size() > limit) found.resize(limit);
    }
    if (pairs->size() < 2 * kPartitionsPerStep) exact = true;
  }
  std::vector<Command> shows;
  shows.reserve(found.size());
  for (const auto& [due, id] : found) shows.push_back(calls::show(request.queue, id));
  auto replies = c.redis.pipeline(std::move(shows));
  if (!replies) return std::unexpected(replies.error());
  proto::AdminReply reply;
  for (size_t i = 0; i < found.size(); ++i) {
    auto row = calls::parse_show((*replies)[i].get());
    if (!row) return std::unexpected(row.error());
    if (row->empty()) continue;  // promoted or cancelled since
    (*row)["id"] = found[i].second;
    (*row)["queue"] = request.queue;
    reply.rows.push_back(std::move(*row));
  }
  reply.summary = exact ? "exact" : "the first 1,024 partitions read: later jobs may be missing";
  return reply;
}

}  // namespace dueq::broker
