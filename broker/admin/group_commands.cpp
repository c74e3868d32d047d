#include "broker/admin/group_commands.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "broker/loop/group_enqueuer.hpp"
#include "broker/store/keys.hpp"
#include "common/logging.hpp"
#include "common/names.hpp"

namespace dueq::broker {

namespace calls {
Command group_show(const std::string& queue, const std::string& group, const std::string& cursor, int64_t count) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::group_show,
                     {k.groups, k.ready, k.leased, k.done, k.dead, k.cancelled, k.results, k.errors})
      .add(group)
      .add(cursor)
      .add(count);
}
}  // namespace calls

namespace {

Result<void> only_args(const proto::AdminRequest& request, std::initializer_list<std::string_view> allowed) {
  for (const auto& [name, value] : request.args)
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
      return fail(Errc::bad_argument, fmt::format("unknown argument '{}'", loggable(name)));
  return {};
}

Result<std::string> batch_arg(const proto::AdminRequest& request) {
  const auto it = request.args.find("batch");
  if (it == request.args.end() || it->second.empty() || it->second.size() > proto::GroupEnqueue::kMaxBatchIdBytes)
    return fail(Errc::bad_argument, "batch: the batch id, 1..128 bytes");
  return it->second;
}

// The group a `group` request names: "b" + its batch or "f" + its parent.
Result<std::string> named_group(const proto::AdminRequest& request) {
  const auto batch = request.args.find("batch");
  const auto parent = request.args.find("parent");
  if ((batch == request.args.end()) == (parent == request.args.end()))
    return fail(Errc::bad_argument, "give either batch (a batch id) or parent (a flow parent's job id)");
  if (batch != request.args.end()) {
    auto id = batch_arg(request);
    if (!id) return std::unexpected(id.error());
    return "b" + *id;
  }
  if (auto ok = validate_job_id(parent->second); !ok) return std::unexpected(ok.error());
  return "f" + parent->second;
}

}  // namespace

Result<proto::AdminReply> close_batch(AdminContext& c, const proto::AdminRequest& request) {
  if (auto ok = only_args(request, {"batch"}); !ok) return std::unexpected(ok.error());
  auto batch = batch_arg(request);
  if (!batch) return std::unexpected(batch.error());
  proto::GroupEnqueue close{0, request.queue, *batch, proto::BatchAction::add, true, {}};
  const auto& policy = c.config.policy(request.queue);
  auto r = c.redis.call(calls::enqueue_group(close, c.now_ms, policy.max_attempts, 0, policy.done_retention_s));
  if (!r) return std::unexpected(r.error());
  auto outcome = calls::parse_enqueue_group(r->get());
  if (!outcome) return std::unexpected(outcome.error());
  std::string result = "closed";
  switch (outcome->code) {
    case calls::GroupEnqueued::no_batch: return fail(Errc::not_found, fmt::format("no batch {} in queue '{}'", loggable(*batch), request.queue));
    case calls::GroupEnqueued::batch_closed: result = "closed already"; break;
    case calls::GroupEnqueued::accepted: c.effects.due_at(request.queue, outcome->released_due_ms); break;
    default: return fail(Errc::internal, "enqueue_group: an unexpected reply to a close");
  }
  spdlog::info("by key {}: batch {} of queue {} {}", loggable(c.requester), loggable(*batch), request.queue, result);
  proto::AdminReply reply;
  reply.rows.push_back({{"batch", *batch}, {"queue", request.queue}, {"result", result}});
  reply.summary = fmt::format("batch {} {}", *batch, result);
  return reply;
}

Result<proto::AdminReply> show_group(AdminContext& c, const proto::AdminRequest& request) {
  if (auto ok = only_args(request, {"batch", "parent", "after", "limit"}); !ok) return std::unexpected(ok.error());
  auto group = named_group(request);
  if (!group) return std::unexpected(group.error());
  const auto after = request.args.find("after");
  const std::string cursor = after == request.args.end() ? "0" : after->second;
  if (cursor.empty() || cursor.size() > 20 || cursor.find_first_not_of("0123456789") != std::string::npos)
    return fail(Errc::bad_argument, "after: the `next` of the last page (digits)");
  auto limit = integer_arg(request, "limit", 0, 100);
  if (!limit) return fail(Errc::bad_argument, "limit: members per page, 0..100");
  auto r = c.redis.call(calls::group_show(request.queue, *group, cursor, limit->value_or(50)));
  if (!r) return std::unexpected(r.error());
  auto values = reply::strings(r->get(), "group_show");
  if (!values) return std::unexpected(values.error());
  const std::string what = (*group)[0] == 'b' ? "batch" : "flow parent";
  if (values->empty())
    return fail(Errc::not_found, fmt::format("no {} {} in queue '{}' (or it settled longer ago than the retention)", what,
                                             loggable(group->substr(1)), request.queue));
  static constexpr std::array kStatus{"kind",    "state",     "open",   "total",    "pending",    "done",
                                      "dead",    "cancelled", "parent", "success",  "complete",   "settled_ms"};
  if (values->size() < kStatus.size() + 1 || (values->size() - kStatus.size() - 1) % 4 != 0)
    return fail(Errc::internal, "group_show: an unreadable reply");
  proto::AdminReply reply;
  std::map<std::string, std::string> status{{"queue", request.queue}};
  for (size_t i = 0; i < kStatus.size(); ++i) status[kStatus[i]] = (*values)[i];
  status["kind"] = status["kind"] == "f" ? "flow" : "batch";
  status[(*group)[0] == 'b' ? "batch" : "parent"] = group->substr(1);
  reply.rows.push_back(std::move(status));
  for (size_t i = kStatus.size() + 1; i + 3 < values->size(); i += 4)
    reply.rows.push_back({{"member", (*values)[i]},
                          {"member_state", (*values)[i + 1] == "leased" ? "running" : (*values)[i + 1]},
                          {"result", (*values)[i + 2]},
                          {"error", (*values)[i + 3]}});
  const std::string& next = (*values)[kStatus.size()];
  reply.next = next == "0" ? "" : next;
  reply.summary = fmt::format("{} {}: {}", what, group->substr(1), reply.rows.front()["state"]);
  return reply;
}

}  // namespace dueq::broker
