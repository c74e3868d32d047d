#include "broker/admin/job_list.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "broker/admin/job_lookup.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"
#include "common/names.hpp"

namespace dueq::broker {

namespace {

constexpr size_t kScanStep = 500;       // entries read per step
// Lookups per round trip: Redis runs a pipeline's calls back to back, and the
// event loop's rounds wait behind them (100 of them put the flow's p99
// beside a storm of searches at 1.60 x without, 10 at 1.38 x: one run each).
constexpr size_t kShowStep = 10;
constexpr size_t kReplyBytes = size_t{4} << 20;
constexpr size_t kMaxFilterBytes = 1'024;
constexpr size_t kPartitionsPerTrip = 256;

struct Entry {
  int64_t score = 0;
  std::string id;
  bool operator<(const Entry& o) const { return score != o.score ? score < o.score : id < o.id; }
};

bool after_cursor(const Entry& e, const std::optional<ListCursor>& c) {
  return !c || e.score > c->score || (e.score == c->score && e.id > c->id);
}

Result<int64_t> whole(std::string_view text, const char* what) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0)
    return fail(Errc::bad_argument, fmt::format("{}: expected milliseconds since the epoch (0 or more)", what));
  return v;
}

Result<std::vector<Entry>> entries_of(const redisReply* r, const char* what) {
  auto flat = reply::strings(r, what);
  if (!flat) return std::unexpected(flat.error());
  std::vector<Entry> out;
  for (size_t i = 0; i + 1 < flat->size(); i += 2) {
    double score = 0;
    const auto& s = (*flat)[i + 1];
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), score);
    if (ec != std::errc()) return fail(Errc::internal, fmt::format("{}: a score that is not a number", what));
    out.push_back({static_cast<int64_t>(score), (*flat)[i]});
  }
  return out;
}

// The next entries of one sorted set after the cursor, in order. A cursor
// whose id is still there resumes at its rank (ties of any size are then
// passed in one step); one whose id left resumes at its score.
Result<std::vector<Entry>> next_in_zset(RedisClient& redis, const std::string& key, const std::optional<ListCursor>& after,
                                        int64_t since_ms, size_t n) {
  int64_t from = 0;
  if (after) {
    auto ranked = redis.pipeline({Command{"ZRANK", key, after->id}, Command{"ZSCORE", key, after->id},
                                  Command{"ZCOUNT", key, "-inf", fmt::format("({}", after->score)}});
    if (!ranked) return std::unexpected(ranked.error());
    const redisReply* rank = (*ranked)[0].get();
    const bool same = rank && rank->type == REDIS_REPLY_INTEGER && reply::str((*ranked)[1].get()) != "" &&
                      std::stod(reply::str((*ranked)[1].get())) == static_cast<double>(after->score);
    from = same ? rank->integer + 1 : (*ranked)[2]->integer;
  } else {
    auto count = redis.call(Command{"ZCOUNT", key, "-inf", fmt::format("({}", since_ms)});
    if (!count) return std::unexpected(count.error());
    from = (*count)->integer;
  }
  auto r = redis.call(Command{"ZRANGE", key, std::to_string(from), std::to_string(from + static_cast<int64_t>(n) - 1), "WITHSCORES"});
  if (!r) return std::unexpected(r.error());
  auto entries = entries_of(r->get(), "ZRANGE");
  if (!entries) return entries;
  std::erase_if(*entries, [&](const Entry& e) { return !after_cursor(e, after); });
  return entries;
}

// The next entries of the schedule after the cursor, in order: read from
// every partition (the index's lower bounds stop the reading once no
// further partition can hold an earlier one).
Result<std::vector<Entry>> next_in_schedule(RedisClient& redis, const QueueKeys& k, const std::optional<ListCursor>& after,
                                            int64_t since_ms, size_t n) {
  const std::string low = after ? std::to_string(after->score) : std::to_string(since_ms);
  std::vector<Entry> found;
  for (size_t from = 0; from < kSchedulePartitions; from += kPartitionsPerTrip) {
    auto index = redis.call(Command{"ZRANGE", k.schedule, std::to_string(from), std::to_string(from + kPartitionsPerTrip - 1), "WITHSCORES"});
    if (!index) return std::unexpected(index.error());
    auto partitions = entries_of(index->get(), "ZRANGE");
    if (!partitions) return std::unexpected(partitions.error());
    std::vector<Command> reads;
    size_t used = 0;
    for (const auto& p : *partitions) {
      if (found.size() >= n && found[n - 1].score < p.score) break;  // this bound and every later one is past the page
      reads.push_back(Command{"ZRANGE", k.schedule + ":" + p.id, low, "+inf", "BYSCORE", "LIMIT", "0",
                              std::to_string(n + kScanStep), "WITHSCORES"});
      ++used;
    }
    if (!reads.empty()) {
      auto replies = redis.pipeline(std::move(reads));
      if (!replies) return std::unexpected(replies.error());
      for (const auto& reply : *replies) {
        auto entries = entries_of(reply.get(), "ZRANGE");
        if (!entries) return std::unexpected(entries.error());
        for (auto& e : *entries)
          if (after_cursor(e, after)) found.push_back(std::move(e));
      }
      std::sort(found.begin(), found.end());
      if (found.size() > n) found.resize(n);
    }
    if (used < partitions->size() || partitions->size() < kPartitionsPerTrip) break;
  }
  return found;
}

std::string state_key(const QueueKeys& k, const std::string& state) {
  if (state == "ready") return k.ready;
  if (state == "running") return k.leased;
  if (state == "done") return k.done;
  if (state == "dead") return k.dead;
  return k.cancelled;
}

size_t row_size(const std::map<std::string, std::string>& row) {
  size_t n = 0;
  for (const auto& [key, value] : row) n += key.size() + value.size() + 4;
  return n;
}

bool matches(const ListFilter& f, const std::map<std::string, std::string>& fields) {
  auto get = [&](const char* key) {
    auto it = fields.find(key);
    return it == fields.end() ? std::string() : it->second;
  };
  if (!f.type.empty() && get("t") != f.type) return false;
  if (!f.error.empty() && get("e").find(f.error) == std::string::npos) return false;
  return true;
}

// The page's rows from the entries looked at: the filters that need a
// job's fields are applied here. Returns false when the page is full.
Result<bool> add_rows(RedisClient& redis, const std::string& queue, const ListFilter& f, const std::vector<Entry>& entries,
                      size_t limit, proto::AdminReply& reply, size_t& bytes, std::optional<ListCursor>& cursor) {
  for (size_t i = 0; i < entries.size(); i += kShowStep) {
    std::vector<Command> shows;
    const size_t end = std::min(entries.size(), i + kShowStep);
    for (size_t j = i; j < end; ++j) shows.push_back(calls::show(queue, entries[j].id));
    auto replies = redis.pipeline(std::move(shows));
    if (!replies) return std::unexpected(replies.error());
    for (size_t j = i; j < end; ++j) {
      cursor = ListCursor{entries[j].score, entries[j].id};
      auto fields = calls::parse_show((*replies)[j - i].get());
      if (!fields) return std::unexpected(fields.error());
      // Moved to another state since the range was read, or filtered out.
      if (fields->empty() || !matches(f, *fields)) continue;
      (*fields)["id"] = entries[j].id;
      (*fields)["queue"] = queue;
      auto row = listed_row(std::move(*fields));
      bytes += row_size(row);
      reply.rows.push_back(std::move(row));
      if (reply.rows.size() >= limit || bytes > kReplyBytes) return false;
    }
  }
  return true;
}

}  // namespace

std::string ListCursor::text() const { return fmt::format("{}:{}", score, id); }

Result<std::optional<ListCursor>> ListCursor::parse(std::string_view text) {
  if (text.empty()) return std::optional<ListCursor>();
  const auto colon = text.find(':');
  ListCursor c;
  if (colon == std::string_view::npos) return fail(Errc::bad_argument, "after: not a cursor this broker gave (the `next` of an earlier page)");
  auto score = whole(text.substr(0, colon), "after");
  if (!score) return fail(Errc::bad_argument, "after: not a cursor this broker gave (the `next` of an earlier page)");
  c.score = *score;
  c.id = std::string(text.substr(colon + 1));
  if (auto ok = validate_job_id(c.id); !ok) return fail(Errc::bad_argument, "after: " + ok.error().message);
  return std::optional<ListCursor>(std::move(c));
}

Result<ListFilter> ListFilter::parse(const std::map<std::string, std::string>& args) {
  static const std::set<std::string, std::less<>> kStates{"scheduled", "ready", "running", "done", "dead", "cancelled"};
  static const std::set<std::string, std::less<>> kKnown{"state", "type", "since", "until", "error", "id_prefix", "after"};
  ListFilter f;
  for (const auto& [name, value] : args) {
    if (!kKnown.contains(name)) return fail(Errc::bad_argument, "list: no argument " + name);
    if (value.size() > kMaxFilterBytes) return fail(Errc::bad_argument, fmt::format("{}: at most {} bytes", name, kMaxFilterBytes));
  }
  auto get = [&](const char* name) {
    auto it = args.find(name);
    return it == args.end() ? std::string() : it->second;
  };
  f.state = get("state");
  if (!kStates.contains(f.state))
    return fail(Errc::bad_argument, "state: one of scheduled, ready, running, done, dead, cancelled");
  f.type = get("type");
  if (!f.type.empty())
    if (auto ok = validate_job_type(f.type); !ok) return fail(Errc::bad_argument, "type: " + ok.error().message);
  if (auto since = get("since"); !since.empty()) {
    auto v = whole(since, "since");
    if (!v) return std::unexpected(v.error());
    f.since_ms = *v;
  }
  if (auto until = get("until"); !until.empty()) {
    auto v = whole(until, "until");
    if (!v) return std::unexpected(v.error());
    f.until_ms = *v;
  }
  if (f.since_ms > f.until_ms) return fail(Errc::bad_argument, "since: after until");
  f.error = get("error");
  f.id_prefix = get("id_prefix");
  auto after = ListCursor::parse(get("after"));
  if (!after) return std::unexpected(after.error());
  f.after = std::move(*after);
  return f;
}

Result<ListPage> scan_jobs(RedisClient& redis, const std::string& queue, const ListFilter& filter,
                           std::optional<ListCursor> cursor, size_t limit, size_t examine) {
  const QueueKeys k(queue);
  ListPage page;
  size_t bytes = 0;
  bool more = true;
  // A running job's place is its lease deadline, which each heartbeat moves
  // on: one the page passed may come again further on. It is shown once a
  // page (a later page may show it again).
  std::set<std::string, std::less<>> seen;
  while (more && page.examined < examine) {
    auto next = filter.state == "scheduled"
                    ? next_in_schedule(redis, k, cursor, filter.since_ms, kScanStep)
                    : next_in_zset(redis, state_key(k, filter.state), cursor, filter.since_ms, kScanStep);
    if (!next) return std::unexpected(next.error());
    if (next->empty()) more = false;
    std::vector<Entry> candidates;
    for (auto& e : *next) {
      if (e.score > filter.until_ms) {
        more = false;
        break;
      }
      ++page.examined;
      cursor = ListCursor{e.score, e.id};
      if (e.score >= filter.since_ms && e.id.starts_with(filter.id_prefix) && seen.insert(e.id).second)
        candidates.push_back(std::move(e));
    }
    std::optional<ListCursor> row_cursor = cursor;
    auto room = add_rows(redis, queue, filter, candidates, limit, page.rows, bytes, row_cursor);
    if (!room) return std::unexpected(room.error());
    if (!*room) {
      cursor = row_cursor;  // full: the next page starts after its last row
      break;
    }
  }
  const bool full = page.rows.rows.size() >= limit || bytes > kReplyBytes;
  if ((more || full) && cursor) page.next = cursor;
  return page;
}

Result<void> append_job_rows(RedisClient& redis, const std::string& queue, const std::vector<std::string>& ids,
                             proto::AdminReply& reply) {
  for (size_t i = 0; i < ids.size(); i += kShowStep) {
    std::vector<Command> shows;
    const size_t end = std::min(ids.size(), i + kShowStep);
    for (size_t j = i; j < end; ++j) shows.push_back(calls::show(queue, ids[j]));
    auto replies = redis.pipeline(std::move(shows));
    if (!replies) return std::unexpected(replies.error());
    for (size_t j = i; j < end; ++j) {
      auto fields = calls::parse_show((*replies)[j - i].get());
      if (!fields) return std::unexpected(fields.error());
      if (fields->empty()) continue;
      (*fields)["id"] = ids[j];
      (*fields)["queue"] = queue;
      reply.rows.push_back(listed_row(std::move(*fields)));
    }
  }
  return {};
}

Result<void> check_list_queue(RedisClient& redis, const std::string& queue) {
  if (auto ok = validate_queue_name(queue); !ok) return fail(Errc::bad_argument, "a queue is needed: " + ok.error().message);
  auto queues = known_queues(redis);
  if (!queues) return std::unexpected(queues.error());
  if (!std::binary_search(queues->begin(), queues->end(), queue)) return fail(Errc::not_found, "no queue " + queue);
  return {};
}

Result<size_t> page_limit(const proto::AdminRequest& request) {
  const size_t limit = request.limit == 0 ? 100 : request.limit;
  if (limit > kListMaxLimit) return fail(Errc::bad_argument, fmt::format("limit: 1..{}", kListMaxLimit));
  return limit;
}

Result<proto::AdminReply> list_jobs(AdminContext& c, const proto::AdminRequest& request) {
  auto filter = ListFilter::parse(request.args);
  if (!filter) return std::unexpected(filter.error());
  const auto limit = page_limit(request);
  if (!limit) return std::unexpected(limit.error());
  if (auto ok = check_list_queue(c.redis, request.queue); !ok) return std::unexpected(ok.error());
  auto page = scan_jobs(c.redis, request.queue, *filter, filter->after, *limit, kListExamined);
  if (!page) return std::unexpected(page.error());
  proto::AdminReply reply = std::move(page->rows);
  reply.next = page->next ? page->next->text() : "";
  reply.summary = fmt::format("{} {} jobs{}; {} looked at", reply.rows.size(), filter->state,
                              reply.next.empty() ? "" : ", more may follow (--after " + reply.next + ")", page->examined);
  return reply;
}

}  // namespace dueq::broker
