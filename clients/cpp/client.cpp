// The public client: turns calls into protocol requests and replies into
// results, and offers each call blocking, with a future or with a callback.
// The connection (clients/cpp/connection.hpp) sends them and tracks the replies.
#include "dueq/client.hpp"

#include <algorithm>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include "clients/cpp/client_impl.hpp"
#include "common/clock.hpp"
#include "common/ids.hpp"

namespace dueq {

namespace {

using client::ask;
using client::as_future;
using client::blocking_from_callback;
using client::unexpected_reply;

std::expected<std::vector<EnqueueResult>, ClientError> enqueue_results(proto::Frame frame, size_t jobs) {
  auto* reply = std::get_if<proto::EnqueueReply>(&frame);
  if (reply == nullptr || reply->results.size() != jobs) return std::unexpected(unexpected_reply("enqueue"));
  std::vector<EnqueueResult> out;
  out.reserve(jobs);
  for (auto& r : reply->results)
    out.push_back(EnqueueResult{std::move(r.id), static_cast<EnqueueResult::Status>(r.status), std::move(r.reason),
                                r.status == proto::EnqueueStatus::overloaded ? reply->retry_after_ms : 0,
                                std::move(r.existing_id)});
  return out;
}

// The most bytes of a job's frame beyond its payload, id, type and queue: the
// job's array and the headers and integers msgpack writes for it.
constexpr size_t kJobFrameOverhead = 64;

std::expected<proto::Enqueue, ClientError> enqueue_request(std::vector<JobSpec>& jobs) {
  if (jobs.empty() || jobs.size() > proto::kMaxBatch)
    return std::unexpected(ClientError{"bad_argument", "a batch holds 1..10000 jobs", 0});
  // The broker drops a connection that sends a frame over its limit, and a
  // resend would drop it again: such a batch is refused here.
  size_t frame_bytes = 64;
  for (const auto& job : jobs)
    frame_bytes += job.payload.size() + job.id.size() + job.type.size() + job.queue.size() + job.key.size() +
                   job.unique_key.size() + kJobFrameOverhead;
  if (frame_bytes > proto::kMaxFrameBytes)
    return std::unexpected(ClientError{"bad_argument", "a batch of " + std::to_string(jobs.size()) + " jobs takes up to " +
                                                           std::to_string(frame_bytes) + " bytes, over the broker's " +
                                                           std::to_string(proto::kMaxFrameBytes) +
                                                           " byte frame limit: send it in parts",
                                       0});
  proto::Enqueue request;
  request.jobs.reserve(jobs.size());
  for (auto& job : jobs) request.jobs.push_back(client::new_job(std::move(job)));
  return request;
}

}  // namespace

Client::Client(const std::string& broker_endpoint, ClientOptions options)
    : impl_(std::make_unique<Impl>(broker_endpoint, std::move(options))) {}
Client::~Client() { impl_->connection.close(); }

int64_t Client::in_ms(int64_t delay_ms) { return wall_ms() + delay_ms; }

void Client::enqueue_batch_async(std::vector<JobSpec> jobs, EnqueueBatchCallback on_done) {
  if (!on_done) throw std::invalid_argument("enqueue_batch_async: an empty on_done callback");
  auto request = enqueue_request(jobs);
  if (!request)
    return impl_->connection.refuse(request.error(), [on_done = std::move(on_done)](FrameResult frame) { on_done(std::unexpected(frame.error())); });
  const size_t count = request->jobs.size();
  impl_->connection.submit(std::move(*request), [count, on_done = std::move(on_done)](FrameResult frame) {
    if (!frame) return on_done(std::unexpected(std::move(frame.error())));
    on_done(enqueue_results(std::move(*frame), count));
  });
}

void Client::enqueue_async(JobSpec job, EnqueueCallback on_done) {
  if (!on_done) throw std::invalid_argument("enqueue_async: an empty on_done callback");
  std::vector<JobSpec> one;
  one.push_back(std::move(job));
  auto request = enqueue_request(one);
  if (!request)
    return impl_->connection.refuse(request.error(), [on_done = std::move(on_done)](FrameResult frame) { on_done(std::unexpected(frame.error())); });
  impl_->connection.submit(std::move(*request), [on_done = std::move(on_done)](FrameResult frame) {
    if (!frame) return on_done(std::unexpected(std::move(frame.error())));
    auto results = enqueue_results(std::move(*frame), 1);
    if (!results) return on_done(std::unexpected(results.error()));
    on_done(std::move(results->front()));
  });
}

std::future<std::expected<std::vector<EnqueueResult>, ClientError>> Client::enqueue_batch_async(std::vector<JobSpec> jobs) {
  return as_future<std::vector<EnqueueResult>>(
      [&](EnqueueBatchCallback on_done) { enqueue_batch_async(std::move(jobs), std::move(on_done)); });
}

std::future<std::expected<EnqueueResult, ClientError>> Client::enqueue_async(JobSpec job) {
  return as_future<EnqueueResult>([&](EnqueueCallback on_done) { enqueue_async(std::move(job), std::move(on_done)); });
}

std::expected<EnqueueResult, ClientError> Client::enqueue(JobSpec job) {
  if (impl_->connection.on_io_thread()) return std::unexpected(blocking_from_callback("enqueue"));
  return enqueue_async(std::move(job)).get();
}

std::expected<std::vector<EnqueueResult>, ClientError> Client::enqueue_batch(std::vector<JobSpec> jobs) {
  if (impl_->connection.on_io_thread()) return std::unexpected(blocking_from_callback("enqueue_batch"));
  return enqueue_batch_async(std::move(jobs)).get();
}

std::expected<BrokerStats, ClientError> Client::broker_stats() {
  if (impl_->connection.on_io_thread()) return std::unexpected(blocking_from_callback("stats"));
  using Result = std::expected<BrokerStats, ClientError>;
  return ask<BrokerStats>(impl_->connection, proto::StatsRequest{}, [](proto::Frame frame) -> Result {
    auto* reply = std::get_if<proto::StatsReply>(&frame);
    if (reply == nullptr) return std::unexpected(unexpected_reply("stats"));
    BrokerStats out{.workers = reply->workers};
    for (const auto& q : reply->queues) {
      out.queues.push_back(QueueStats{q.queue, q.scheduled, q.waiting, q.in_flight, q.done, q.dead, q.accepted,
                                      q.retried, q.stale_acks, q.next_due_ms, q.cancelled, q.purged, q.died,
                                      q.unconfirmed, q.replayed, q.stale_extends, q.oldest_ready_due_ms, q.paused_since_ms,
                                      q.rate_limit, q.rate_burst, q.concurrency_limit, q.history_kept, q.history_trimmed,
                                      q.keys_running, q.waiting_for_key, {}, q.snoozed, q.expired});
      for (const auto& top : q.top_keys) out.queues.back().top_keys.emplace_back(top.key.data, top.waiting);
    }
    return out;
  }).get();
}

std::expected<std::vector<QueueStats>, ClientError> Client::stats() {
  auto all = broker_stats();
  if (!all) return std::unexpected(std::move(all.error()));
  return std::move(all->queues);
}

std::expected<std::optional<std::map<std::string, std::string>>, ClientError> Client::job(const std::string& id,
                                                                                           const std::string& queue) {
  if (impl_->connection.on_io_thread()) return std::unexpected(blocking_from_callback("job"));
  using Fields = std::optional<std::map<std::string, std::string>>;
  return ask<Fields>(impl_->connection, proto::JobRequest{0, id, queue}, [](proto::Frame frame) -> std::expected<Fields, ClientError> {
    auto* reply = std::get_if<proto::JobReply>(&frame);
    if (reply == nullptr) return std::unexpected(unexpected_reply("job"));
    if (!reply->found) return Fields{};
    return Fields(std::move(reply->fields));
  }).get();
}

std::expected<std::optional<JobDocument>, ClientError> Client::job_document(const std::string& id,
                                                                           const std::string& queue) {
  auto fields = job(id, queue);
  if (!fields) return std::unexpected(fields.error());
  if (!*fields) return std::optional<JobDocument>();
  return std::optional<JobDocument>(dueq::job_document(**fields));
}

std::expected<AdminResult, ClientError> Client::admin(const AdminCommand& command) {
  if (impl_->connection.on_io_thread()) return std::unexpected(blocking_from_callback(command.op));
  return ask<AdminResult>(
      impl_->connection, proto::AdminRequest{0, command.op, command.queue, command.ids, command.older_than_ms, command.limit, command.args},
      [op = command.op](proto::Frame frame) -> std::expected<AdminResult, ClientError> {
        auto* reply = std::get_if<proto::AdminReply>(&frame);
        if (reply == nullptr) return std::unexpected(unexpected_reply(op));
        return AdminResult{std::move(reply->rows), std::move(reply->summary), std::move(reply->next)};
      }).get();
}

namespace {
std::optional<JobEnd::State> end_state(const std::string& state) {
  if (state == "done") return JobEnd::State::done;
  if (state == "dead") return JobEnd::State::dead;
  if (state == "cancelled") return JobEnd::State::cancelled;
  if (state == "pending") return JobEnd::State::pending;
  if (state == "unknown") return JobEnd::State::unknown;
  return std::nullopt;
}
}  // namespace

// WAIT requests of at most 3/4 of an attempt's timeout each (the broker
// answers "pending" when one runs out), until `timeout`; a broker that
// stopped answering or does not lead is left for the next, in time.
std::expected<JobEnd, ClientError> Client::wait(const std::string& id, const std::string& queue, std::chrono::milliseconds timeout) {
  if (impl_->connection.on_io_thread()) return std::unexpected(blocking_from_callback("wait"));
  const int64_t deadline = steady_ms() + std::max<int64_t>(0, timeout.count());
  const int64_t longest = std::clamp<int64_t>(impl_->timeout_ms * 3 / 4 - 100, 0, proto::WaitRequest::kMaxTimeoutMs);
  while (true) {
    const int64_t left = std::max<int64_t>(0, deadline - steady_ms());
    auto end = ask<JobEnd>(impl_->connection, proto::WaitRequest{0, queue, id, std::min(left, longest)},
                           [](proto::Frame frame) -> std::expected<JobEnd, ClientError> {
                             auto* reply = std::get_if<proto::WaitReply>(&frame);
                             if (reply == nullptr) return std::unexpected(unexpected_reply("wait"));
                             const auto state = end_state(reply->state);
                             if (!state) return std::unexpected(unexpected_reply("wait"));
                             return JobEnd{*state, reply->finished_ms, std::move(reply->result.data), std::move(reply->error)};
                           }).get();
    const bool again = end ? end->state == JobEnd::State::pending
                           : end.error().code == "timeout" || end.error().code == "unavailable" || end.error().code == "not_leader";
    if (!again || steady_ms() >= deadline) return end;
    if (!end) std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(100, deadline - steady_ms())));
  }
}

std::expected<void, ClientError> Client::reschedule(const std::string& id, int64_t due_ms, const std::string& queue) {
  auto done = admin(AdminCommand{"job_reschedule", queue, {id}, 0, 0, {{"at_ms", std::to_string(due_ms)}}});
  if (!done) return std::unexpected(done.error());
  return {};
}

std::expected<void, ClientError> Client::run_now(const std::string& id, const std::string& queue) {
  auto done = admin(AdminCommand{"job_reschedule", queue, {id}, 0, 0, {{"now", "1"}}});
  if (!done) return std::unexpected(done.error());
  return {};
}

std::expected<std::string, ClientError> Client::edit_payload(const std::string& id, std::string payload,
                                                             const std::string& version, const std::string& queue) {
  auto done = admin(AdminCommand{"job_edit", queue, {id}, 0, 0, {{"payload", std::move(payload)}, {"version", version}}});
  if (!done) return std::unexpected(done.error());
  if (done->rows.empty() || !done->rows.front().contains("version"))
    return std::unexpected(ClientError{"internal", "job_edit: the broker's reply names no version"});
  return done->rows.front().at("version");
}

}  // namespace dueq
