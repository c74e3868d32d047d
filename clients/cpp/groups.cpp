// Flows and batches (docs/flows.md): GROUP_ENQUEUE requests, and the ADMIN
// `group` reads of a flow's or a batch's status.
#include <algorithm>

#include "clients/cpp/client_impl.hpp"
#include "dueq/client.hpp"

namespace dueq {

namespace {

using client::ask;
using client::blocking_from_callback;
using client::unexpected_reply;

proto::ChildFailure wire_failure(ChildFailure on_failure) {
  switch (on_failure) {
    case ChildFailure::ignore: return proto::ChildFailure::ignore;
    case ChildFailure::proceed: return proto::ChildFailure::proceed;
    default: return proto::ChildFailure::fail_parent;
  }
}

// The tree in the order the protocol takes it: each job after its parent
// (depth first), numbered from 1.
void flatten(FlowJob&& node, uint32_t parent, const std::string& queue, std::vector<proto::GroupJob>& out) {
  if (node.job.queue.empty()) node.job.queue = queue;
  out.push_back(proto::GroupJob{client::new_job(std::move(node.job)), parent,
                                parent == 0 ? proto::ChildFailure::none : wire_failure(node.on_failure),
                                proto::GroupRole::job});
  const auto self = static_cast<uint32_t>(out.size());
  for (auto& child : node.children) flatten(std::move(child), self, queue, out);
}

std::vector<proto::GroupJob> members(const std::string& queue, std::vector<JobSpec>&& jobs) {
  std::vector<proto::GroupJob> out;
  for (auto& job : jobs) {
    if (job.queue.empty()) job.queue = queue;
    out.push_back(proto::GroupJob{client::new_job(std::move(job)), 0, proto::ChildFailure::none, proto::GroupRole::job});
  }
  return out;
}

std::expected<GroupResult, ClientError> send(client::Connection& connection, proto::GroupEnqueue request) {
  std::vector<std::string> ids;
  ids.reserve(request.jobs.size());
  for (const auto& g : request.jobs) ids.push_back(g.job.id);
  return ask<GroupResult>(connection, std::move(request), [ids = std::move(ids)](proto::Frame frame)
                          -> std::expected<GroupResult, ClientError> {
           auto* reply = std::get_if<proto::GroupEnqueueReply>(&frame);
           if (reply == nullptr || reply->status > proto::GroupStatus::batch_full)
             return std::unexpected(unexpected_reply("group_enqueue"));
           return GroupResult{static_cast<GroupResult::Status>(reply->status), std::move(reply->reason), ids,
                              reply->job_index, reply->retry_after_ms};
         }).get();
}

int64_t number(const std::map<std::string, std::string>& row, const char* name) {
  const auto it = row.find(name);
  if (it == row.end()) return 0;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return 0;
  }
}

std::expected<GroupView, ClientError> view(std::expected<AdminResult, ClientError>&& result) {
  if (!result) return std::unexpected(std::move(result.error()));
  if (result->rows.empty()) return std::unexpected(unexpected_reply("group"));
  const auto& s = result->rows.front();
  auto text = [&](const char* name) { return s.contains(name) ? s.at(name) : std::string(); };
  GroupView out{text("kind"), text("state"), text("open") == "1", number(s, "total"), number(s, "pending"),
                number(s, "done"), number(s, "dead"), number(s, "cancelled"), text("parent"), text("success"),
                text("complete"), number(s, "settled_ms"), {}, std::move(result->next)};
  for (size_t i = 1; i < result->rows.size(); ++i) {
    auto& row = result->rows[i];
    out.members.push_back({row["member"], row["member_state"], row["result"], row["error"]});
  }
  return out;
}

}  // namespace

std::expected<GroupResult, ClientError> Client::enqueue_flow(const std::string& queue, FlowJob root) {
  if (impl_->connection.on_io_thread()) return std::unexpected(blocking_from_callback("enqueue_flow"));
  proto::GroupEnqueue request{0, queue, "", proto::BatchAction::none, false, {}};
  flatten(std::move(root), 0, queue, request.jobs);
  if (request.jobs.size() > proto::GroupEnqueue::kMaxJobs)
    return std::unexpected(ClientError{"bad_argument", "a flow holds at most 1000 jobs", 0});
  return send(impl_->connection, std::move(request));
}

std::expected<GroupResult, ClientError> Client::open_batch(const std::string& queue, const std::string& batch_id,
                                                           BatchCallbacks callbacks, std::vector<JobSpec> jobs, bool close) {
  if (impl_->connection.on_io_thread()) return std::unexpected(blocking_from_callback("open_batch"));
  proto::GroupEnqueue request{0, queue, batch_id, proto::BatchAction::open, close, {}};
  auto callback = [&](std::optional<JobSpec>& spec, proto::GroupRole role) {
    if (!spec) return;
    if (spec->queue.empty()) spec->queue = queue;
    request.jobs.push_back(proto::GroupJob{client::new_job(std::move(*spec)), 0, proto::ChildFailure::none, role});
  };
  callback(callbacks.on_success, proto::GroupRole::on_success);
  callback(callbacks.on_complete, proto::GroupRole::on_complete);
  for (auto& m : members(queue, std::move(jobs))) request.jobs.push_back(std::move(m));
  if (request.jobs.size() > proto::GroupEnqueue::kMaxJobs)
    return std::unexpected(ClientError{"bad_argument", "a request holds at most 1000 jobs: add the rest with add_to_batch", 0});
  return send(impl_->connection, std::move(request));
}

std::expected<GroupResult, ClientError> Client::add_to_batch(const std::string& queue, const std::string& batch_id,
                                                             std::vector<JobSpec> jobs, bool close) {
  if (impl_->connection.on_io_thread()) return std::unexpected(blocking_from_callback("add_to_batch"));
  if (jobs.size() > proto::GroupEnqueue::kMaxJobs)
    return std::unexpected(ClientError{"bad_argument", "a request holds at most 1000 jobs", 0});
  return send(impl_->connection, proto::GroupEnqueue{0, queue, batch_id, proto::BatchAction::add, close, members(queue, std::move(jobs))});
}

std::expected<GroupResult, ClientError> Client::close_batch(const std::string& queue, const std::string& batch_id) {
  return add_to_batch(queue, batch_id, {}, true);
}

std::expected<GroupView, ClientError> Client::batch_status(const std::string& queue, const std::string& batch_id,
                                                           const std::string& after, uint32_t limit) {
  std::map<std::string, std::string> args{{"batch", batch_id}, {"limit", std::to_string(limit)}};
  if (!after.empty()) args["after"] = after;
  return view(admin(AdminCommand{"group", queue, {}, 0, 0, std::move(args)}));
}

std::expected<GroupView, ClientError> Client::children(const std::string& queue, const std::string& parent_id,
                                                       const std::string& after, uint32_t limit) {
  std::map<std::string, std::string> args{{"parent", parent_id}, {"limit", std::to_string(limit)}};
  if (!after.empty()) args["after"] = after;
  return view(admin(AdminCommand{"group", queue, {}, 0, 0, std::move(args)}));
}

}  // namespace dueq
