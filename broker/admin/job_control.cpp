#include "broker/admin/job_control.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <set>

#include "broker/admin/job_lookup.hpp"
#include "broker/store/job_record.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"
#include "common/logging.hpp"
#include "common/names.hpp"

namespace dueq::broker {

namespace calls {

Command edit(const std::string& queue, const std::string& id, const std::string& read_record,
             const std::string& new_record) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::edit, {k.schedule, k.ready, k.jobs})
      .add(id)
      .add(static_cast<int64_t>(schedule_partition(id)))
      .add(read_record)
      .add(new_record);
}

Result<EditStatus> parse_edit(const redisReply* r) {
  static constexpr std::array kKnown{EditStatus::not_waiting, EditStatus::changed, EditStatus::edited};
  auto values = reply::integers(r, "edit");
  if (!values) return std::unexpected(values.error());
  if (values->size() != 1) return reply::bad(r, "edit");
  const auto known = reply::code(values->front(), kKnown);
  if (!known) return reply::bad(r, "edit");
  return *known;
}

}  // namespace calls

namespace {

constexpr int64_t kTenYearsMs = 10LL * 366 * 86'400'000;

// The one job id a job command names, and the queue that holds it.
struct Target {
  std::string id;
  std::string queue;
};

Result<Target> find_target(AdminContext& c, const proto::AdminRequest& request, const std::set<std::string>& allowed) {
  for (const auto& [name, value] : request.args)
    if (!allowed.contains(name)) return fail(Errc::bad_argument, fmt::format("unknown argument '{}'", loggable(name)));
  if (request.ids.size() != 1) return fail(Errc::bad_argument, "name exactly one job id");
  if (auto ok = validate_job_id(request.ids.front()); !ok) return std::unexpected(ok.error());
  auto queue = find_job_queue(c.redis, request.ids.front(), request.queue);
  if (!queue) return std::unexpected(queue.error());
  return Target{request.ids.front(), *queue};
}

// The job's state and stored record as lua/show.lua reads them ("" when it
// is unknown).
struct Stored {
  std::string state;
  std::string record;
};

Result<Stored> read_stored(AdminContext& c, const Target& t) {
  auto r = c.redis.call(calls::show(t.queue, t.id));
  if (!r) return std::unexpected(r.error());
  const redisReply* reply = r->get();
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements < 3) return reply::bad(reply, "show");
  return Stored{reply::str(reply->element[0]), reply::str(reply->element[2])};
}

// Why a job that is not waiting cannot be changed.
std::unexpected<Error> not_waiting(const Target& t, const std::string& state) {
  if (state == "held")
    return fail(Errc::conflict, fmt::format("job {} is held until its flow's children or its batch settle: it becomes "
                                            "due then, at its own due time (docs/flows.md)", t.id));
  if (state == "leased")
    return fail(Errc::conflict, fmt::format("job {} is running: it can be changed while it waits (scheduled or ready)", t.id));
  if (state == "dead")
    return fail(Errc::conflict, fmt::format("job {} is dead: replay it first (dueq dead replay {})", t.id, t.id));
  if (state.empty()) return fail(Errc::not_found, fmt::format("no job {} in queue '{}'", t.id, t.queue));
  return fail(Errc::conflict, fmt::format("job {} is {}: only a waiting job can be changed", t.id, state));
}

Result<int64_t> new_due_ms(AdminContext& c, const proto::AdminRequest& request) {
  const auto now_arg = request.args.find("now");
  if (now_arg != request.args.end() && now_arg->second != "1") return fail(Errc::bad_argument, "now: \"1\" or absent");
  auto at = integer_arg(request, "at_ms", 0, c.now_ms + kTenYearsMs);
  if (!at) return fail(Errc::bad_argument, "at_ms: the new due time, ms since the epoch, at most 10 years ahead");
  if (at->has_value() == (now_arg != request.args.end()))
    return fail(Errc::bad_argument, "give either at_ms (the new due time) or now \"1\"");
  return at->has_value() ? std::max(**at, int64_t{0}) : c.now_ms;
}

proto::AdminReply edited_reply(const AdminContext& c, const Target& t, const std::string& state, const std::string& record,
                               std::string_view what) {
  proto::AdminReply reply;
  reply.rows.push_back({{"id", t.id}, {"queue", t.queue}, {"state", state}, {"version", record_version(record)}});
  reply.summary = fmt::format("job {} {}: version {}", t.id, what, record_version(record));
  spdlog::info("by key {}: {} in queue {}", loggable(c.requester), loggable(reply.summary, 256), t.queue);
  return reply;
}

}  // namespace

Result<proto::AdminReply> reschedule_job(AdminContext& c, const proto::AdminRequest& request) {
  auto due = new_due_ms(c, request);
  if (!due) return std::unexpected(due.error());
  auto target = find_target(c, request, {"at_ms", "now"});
  if (!target) return std::unexpected(target.error());
  const bool to_ready = *due <= c.now_ms;
  auto r = c.redis.call(calls::reschedule(target->queue, c.now_ms, *due, {target->id}));
  if (!r) return std::unexpected(r.error());
  auto moved = reply::integers(r->get(), "reschedule");
  if (!moved || moved->size() != 1) return fail(Errc::internal, "reschedule: unreadable reply");
  if (moved->front() == 0) {
    // Left alone: a ready job asked to run now, one already due then, or
    // one no longer waiting.
    auto stored = read_stored(c, *target);
    if (!stored) return std::unexpected(stored.error());
    const bool already = (to_ready && stored->state == "ready") || (!to_ready && stored->state == "scheduled");
    if (!already) return not_waiting(*target, stored->state);
  } else if (to_ready) {
    c.effects.ready_queues.push_back(target->queue);
  } else {
    auto [it, added] = c.effects.earliest_due.emplace(target->queue, *due);
    if (!added) it->second = std::min(it->second, *due);
  }
  proto::AdminReply reply;
  reply.rows.push_back({{"id", target->id},
                        {"queue", target->queue},
                        {"state", to_ready ? "ready" : "scheduled"},
                        {"due_ms", std::to_string(to_ready ? c.now_ms : *due)}});
  reply.summary = moved->front() == 0 ? fmt::format("job {} was {} already", target->id, to_ready ? "ready" : "due then")
                                      : fmt::format("job {} {}", target->id, to_ready ? "is ready to run now" : "rescheduled");
  spdlog::info("by key {}: {} in queue {}", loggable(c.requester), loggable(reply.summary, 256), target->queue);
  return reply;
}

Result<proto::AdminReply> edit_job(AdminContext& c, const proto::AdminRequest& request) {
  const auto payload = request.args.find("payload");
  const auto version = request.args.find("version");
  if (payload == request.args.end()) return fail(Errc::bad_argument, "payload: the job's new payload is required");
  if (version == request.args.end() || version->second.size() != 16)
    return fail(Errc::bad_argument, "version: the job document's `v` (16 hex digits) is required");
  if (payload->second.size() > proto::kMaxPayloadBytes) return fail(Errc::bad_argument, "payload: at most 1 MiB");
  auto target = find_target(c, request, {"payload", "version"});
  if (!target) return std::unexpected(target.error());
  auto stored = read_stored(c, *target);
  if (!stored) return std::unexpected(stored.error());
  if (stored->state != "scheduled" && stored->state != "ready" && stored->state != "held")
    return not_waiting(*target, stored->state);
  auto record = decode_job_record(stored->record);
  if (!record) return std::unexpected(record.error());
  if (record_version(stored->record) != version->second) {
    // The same edit again (a client's retry after `unavailable`: the
    // first was made on the master) finds its payload there: done.
    if (record->payload == payload->second) return edited_reply(c, *target, stored->state, stored->record, "already has that payload");
    return fail(Errc::conflict, fmt::format("job {} changed since version {}: it is version {} now; read it again",
                                            target->id, loggable(version->second), record_version(stored->record)));
  }
  record->payload = payload->second;
  record->payload_checksum = proto::payload_checksum(record->payload);
  const std::string written = encode_job_record(*record);
  auto r = c.redis.call(calls::edit(target->queue, target->id, stored->record, written));
  if (!r) return std::unexpected(r.error());
  if (auto err = reply_error(r->get()); !err.empty()) return fail(Errc::internal, std::string(err));
  auto status = calls::parse_edit(r->get());
  if (!status) return std::unexpected(status.error());
  if (*status == EditStatus::changed)
    return fail(Errc::conflict, fmt::format("job {} changed while it was edited: read it again", target->id));
  if (*status == EditStatus::not_waiting) return not_waiting(*target, "leased");
  return edited_reply(c, *target, stored->state, written, "edited");
}

}  // namespace dueq::broker
