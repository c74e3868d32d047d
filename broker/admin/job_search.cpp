#include "broker/admin/job_search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <set>

#include "broker/admin/job_list.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/round.hpp"

namespace dueq::broker {

namespace {

// The order a search reads them in, and how each one's records are kept
// (lua/search.lua's ARGV[1]).
struct SearchState {
  std::string_view name;
  std::string_view records;
};
constexpr std::array<SearchState, 6> kSearchStates{{{"scheduled", "scheduled"},
                                                    {"ready", "live"},
                                                    {"running", "live"},
                                                    {"dead", "live"},
                                                    {"done", "finished"},
                                                    {"cancelled", "finished"}}};

size_t state_index(std::string_view name) {
  return static_cast<size_t>(
      std::find_if(kSearchStates.begin(), kSearchStates.end(), [&](const SearchState& s) { return s.name == name; }) -
      kSearchStates.begin());
}

std::vector<std::string> split_states(const std::string& text) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    out.push_back(text.substr(from, comma - from));
    from = comma + 1;
  }
  return out;
}

Result<void> parse_states(const std::string& text, SearchFilter& f) {
  if (text.empty()) {
    for (const auto& s : kSearchStates) f.states.emplace_back(s.name);
    return {};
  }
  std::set<size_t> picked;
  for (const auto& name : split_states(text)) {
    const size_t i = state_index(name);
    if (i == kSearchStates.size())
      return fail(Errc::bad_argument, "states: a comma-separated list of scheduled, ready, running, dead, done, cancelled");
    picked.insert(i);
  }
  for (size_t i : picked) f.states.emplace_back(kSearchStates[i].name);
  return {};
}

// "STATE:CURSOR", as a page's `next` gives it.
Result<void> parse_cursor(const std::string& text, SearchFilter& f) {
  if (text.empty()) return {};
  const auto colon = text.find(':');
  const std::string digits = colon == std::string::npos ? "" : text.substr(colon + 1);
  f.state = colon == std::string::npos ? kSearchStates.size() : state_index(text.substr(0, colon));
  if (f.state == kSearchStates.size() || digits.empty() || digits.size() > 20 ||
      !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return fail(Errc::bad_argument, "after: not a cursor this broker gave (the `next` of an earlier page)");
  f.cursor = digits;
  return {};
}

bool wanted(const SearchFilter& f, std::string_view state) {
  return std::find(f.states.begin(), f.states.end(), state) != f.states.end();
}

}  // namespace

Result<SearchFilter> SearchFilter::parse(const std::map<std::string, std::string>& args) {
  // The filters a listing takes are checked as a listing checks them.
  std::map<std::string, std::string> as_list;
  for (const auto& [name, value] : args)
    if (name != "states" && name != "after") as_list[name] = value;
  if (as_list.contains("state")) return fail(Errc::bad_argument, "search: no argument state (states: a list)");
  as_list["state"] = "ready";
  auto list = ListFilter::parse(as_list);
  if (!list) return std::unexpected(list.error());
  SearchFilter f;
  f.type = list->type;
  f.error = list->error;
  f.id_prefix = list->id_prefix;
  f.since_ms = list->since_ms;
  f.until_ms = list->until_ms;
  auto get = [&](const char* name) {
    auto it = args.find(name);
    return it == args.end() ? std::string() : it->second;
  };
  if (auto ok = parse_states(get("states"), f); !ok) return std::unexpected(ok.error());
  if (auto ok = parse_cursor(get("after"), f); !ok) return std::unexpected(ok.error());
  return f;
}

namespace calls {

Command search(const std::string& queue, std::string_view state, const SearchFilter& f, const std::string& cursor) {
  const QueueKeys k(queue);
  const SearchState& s = kSearchStates[state_index(state)];
  std::string set = k.schedule, records = k.jobs;
  if (state == "ready") set = k.ready;
  if (state == "running") set = k.leased;
  if (state == "dead") set = k.dead;
  if (state == "done" || state == "cancelled") {
    set = state == "done" ? k.done : k.cancelled;
    records = k.history;
  }
  Command call = script_call(lua::ScriptId::search, {set, records, k.errors});
  call.add(s.records).add(cursor).add(static_cast<int64_t>(kSearchStep)).add(f.id_prefix).add(f.type).add(f.error);
  call.add(f.since_ms).add(f.until_ms);
  return call;
}

Result<SearchStep> parse_search(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->elements % 2 != 0 ||
      r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_INTEGER || r->element[1]->integer < 0)
    return reply::bad(r, "search");
  SearchStep step;
  step.cursor = reply::str(r->element[0]);
  step.examined = static_cast<size_t>(r->element[1]->integer);
  for (size_t i = 2; i < r->elements; i += 2) step.ids.push_back(reply::str(r->element[i]));
  return step;
}

}  // namespace calls

Result<proto::AdminReply> search_jobs(AdminContext& c, const proto::AdminRequest& request) {
  auto f = SearchFilter::parse(request.args);
  if (!f) return std::unexpected(f.error());
  const auto page = page_limit(request);
  if (!page) return std::unexpected(page.error());
  const size_t limit = *page;
  if (auto ok = check_list_queue(c.redis, request.queue); !ok) return std::unexpected(ok.error());
  std::vector<std::string> matches;
  std::set<std::string, std::less<>> seen;  // ZSCAN may name one twice
  size_t examined = 0, steps = 0;
  size_t state = f->state;
  std::string cursor = f->cursor;
  while (state < kSearchStates.size() && matches.size() < limit && steps < kSearchStepsPerPage) {
    const std::string_view name = kSearchStates[state].name;
    std::string next = "0";
    if (wanted(*f, name)) {
      auto r = c.redis.call(calls::search(request.queue, name, *f, cursor));
      if (!r) return std::unexpected(r.error());
      auto step = calls::parse_search(r->get());
      if (!step) return std::unexpected(step.error());
      ++steps;
      examined += step->examined;
      for (auto& id : step->ids)
        if (seen.insert(id).second) matches.push_back(std::move(id));
      next = step->cursor;
    }
    if (next == "0") {
      ++state;
      cursor = "0";
    } else {
      cursor = next;
    }
  }
  proto::AdminReply reply;
  if (auto ok = append_job_rows(c.redis, request.queue, matches, reply); !ok) return std::unexpected(ok.error());
  if (state < kSearchStates.size()) reply.next = fmt::format("{}:{}", kSearchStates[state].name, cursor);
  reply.summary = fmt::format("{} jobs found; {} looked at{}", reply.rows.size(), examined,
                              reply.next.empty() ? "" : ", more may follow (--after " + reply.next + ")");
  return reply;
}

}  // namespace dueq::broker
