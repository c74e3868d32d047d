#include "broker/admin/job_lookup.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "broker/store/job_record.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"

namespace dueq::broker {

namespace calls {

Command show(const std::string& queue, const std::string& id, bool with_result) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::show, {k.schedule, k.ready, k.leased, k.dead, k.done, k.cancelled, k.jobs,
                                                   k.attempts, k.errors, k.error_logs, k.cancel_requested, k.history,
                                                   k.unique, k.results, k.groups});
  call.add(id).add(static_cast<int64_t>(schedule_partition(id)));
  if (with_result) call.add("1");
  return call;
}

namespace {
// lib/unique.lua's entry of a job holding a unique key: its mode letter
// (a debounced job's deadline after it), then the key; shown as `uk` and
// `uu` (docs/protocol.md, JOB_REPLY).
void add_unique_hold(const std::string& entry, std::map<std::string, std::string>& out) {
  if (entry.empty()) return;
  static const std::map<char, std::string> kModes = {
      {'w', "waiting"}, {'s', "started"}, {'d', "done"}, {'p', "period"}, {'b', "debounce"}};
  const auto mode = kModes.find(entry[0]);
  const size_t key_at = entry[0] == 'b' ? 17 : 1;
  if (mode == kModes.end() || entry.size() <= key_at) return;
  out["uu"] = mode->second;
  out["uk"] = entry.substr(key_at);
}
}  // namespace

Result<std::map<std::string, std::string>> parse_show(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 13) return reply::bad(r, "show");
  using reply::str;
  std::map<std::string, std::string> out;
  const std::string state = str(r->element[0]);
  if (state.empty()) return out;
  out["s"] = state;
  if (state == "dead" || state == "done" || state == "cancelled") out["f"] = str(r->element[1]);
  if (state == "scheduled" || state == "ready" || state == "held") out["r"] = str(r->element[1]);
  // A ready job parked behind its key's limit sorts after every other
  // (lua/lib/keys.lua): its score is its due time plus the offset.
  if (state == "ready" && reply::num(r->element[1]) >= kKeyParkedOffset) {
    out["r"] = std::to_string(reply::num(r->element[1]) - kKeyParkedOffset);
    out["pk"] = "1";
  }
  if (state == "leased") out["l"] = str(r->element[1]);
  if (const std::string bytes = str(r->element[2]); !bytes.empty()) {
    out["v"] = record_version(bytes);
    auto record = decode_job_record(bytes);
    // Shown for what it is: the lookup of a job whose record was damaged
    // must still work.
    if (!record) {
      out["t"] = "(unreadable record: " + record.error().message + ")";
    } else {
      out["t"] = record->type;
      out["p"] = record->payload;
      out["d"] = std::to_string(record->due_ms);
      out["m"] = std::to_string(record->max_attempts);
      out["c"] = std::to_string(record->created_ms);
      if (record->backoff_base_ms != 0) out["bb"] = std::to_string(record->backoff_base_ms);
      if (record->backoff_cap_ms != 0) out["bc"] = std::to_string(record->backoff_cap_ms);
      if (!record->key.empty()) out["k"] = record->key;
      if (record->start_by_ms > 0) out["sb"] = std::to_string(record->start_by_ms);
      if (!record->traceparent.empty()) out["tp"] = record->traceparent;
      if (!record->tracestate.empty()) out["ts"] = record->tracestate;
    }
  }
  // A finished job's attempts were deleted with it: not known, not 0.
  std::string attempts = str(r->element[3]);
  if (attempts.empty()) attempts = "0";
  if (out.contains("t") || attempts != "0") out["a"] = std::move(attempts);
  if (auto e = str(r->element[4]); !e.empty()) out["e"] = e;
  if (auto el = str(r->element[5]); !el.empty()) out["el"] = el;
  if (str(r->element[6]) == "1") out["cx"] = "1";
  if (auto started = str(r->element[7]); !started.empty()) out["st"] = started;
  add_unique_hold(str(r->element[9]), out);
  if (auto worker = str(r->element[8]); !worker.empty()) out["w"] = worker;
  if (state == "done" && r->element[10]->type == REDIS_REPLY_STRING && r->element[10]->len > 0) out["rs"] = str(r->element[10]);
  // Flows and batches (docs/flows.md): the group it waits in, and whether
  // it is a parent (its children: ADMIN group).
  if (const std::string group = str(r->element[11]); group.size() > 1)
    out[group[0] == 'f' ? "gp" : "gb"] = group.substr(1);
  if (str(r->element[12]) == "1") out["gc"] = "1";
  return out;
}

}  // namespace calls

Result<std::vector<std::string>> known_queues(RedisClient& redis) {
  auto r = redis.call(Command{"SMEMBERS", kQueuesKey});
  if (!r) return std::unexpected(r.error());
  auto names = reply::strings(r->get(), "SMEMBERS");
  if (names) std::sort(names->begin(), names->end());
  return names;
}

Result<std::map<std::string, std::string>> job_fields(RedisClient& redis, const std::string& queue,
                                                      const std::string& id) {
  auto r = redis.call(calls::show(queue, id, /*with_result=*/true));
  if (!r) return std::unexpected(r.error());
  return calls::parse_show(r->get());
}

Result<std::vector<std::string>> queues_for(RedisClient& redis, const std::string& queue) {
  if (!queue.empty()) return std::vector<std::string>{queue};
  return known_queues(redis);
}

Result<std::string> find_job_queue(RedisClient& redis, const std::string& id, const std::string& queue) {
  auto names = queues_for(redis, queue);
  if (!names) return std::unexpected(names.error());
  // Ids are unique within a queue only: an id held by two queues is not
  // guessed at.
  std::vector<std::string> holders;
  for (const auto& name : *names) {
    auto fields = job_fields(redis, name, id);
    if (!fields) return std::unexpected(fields.error());
    if (!fields->empty()) holders.push_back(name);
  }
  if (holders.empty()) return fail(Errc::not_found, "no job " + id);
  if (holders.size() > 1)
    return fail(Errc::bad_argument, fmt::format("job {} is in queues {}: name one (--queue)", id, fmt::join(holders, ", ")));
  return holders.front();
}

Result<proto::JobReply> lookup_job(RedisClient& redis, const proto::JobRequest& request) {
  proto::JobReply reply{request.request_id, false, {}};
  auto names = queues_for(redis, request.queue);
  if (!names) return std::unexpected(names.error());
  std::vector<std::string> others;  // further queues holding a job with this id
  for (const auto& name : *names) {
    auto fields = job_fields(redis, name, request.id);
    if (!fields) return std::unexpected(fields.error());
    if (fields->empty()) continue;
    if (reply.found) {
      others.push_back(name);
      continue;
    }
    reply.found = true;
    reply.fields = std::move(*fields);
    reply.fields["queue"] = name;
    reply.fields["id"] = request.id;
  }
  if (!others.empty()) reply.fields["also_in"] = fmt::format("{}", fmt::join(others, ","));
  return reply;
}

}  // namespace dueq::broker
