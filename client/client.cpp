#include "dueq/client.hpp"

#include <zmq.hpp>

#include <stdexcept>

#include "common/clock.hpp"
#include "common/curve.hpp"
#include "common/ids.hpp"
#include "common/protocol.hpp"

namespace dueq {

struct Client::Impl {
  Impl(std::string endpoint, ClientOptions o)
      : options(o), context(1), socket(context, zmq::socket_type::dealer), endpoint(std::move(endpoint)) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::reconnect_ivl, 100);
    auto curve = load_client_curve(options.broker_key, options.key_file);
    if (!curve) throw std::invalid_argument(curve.error().message);
    apply_client_curve(socket, *curve);
    socket.connect(this->endpoint);
  }

  // Sends the request and waits for the reply frame with its request id,
  // sending it again on timeout. Requests are idempotent, so a resend is safe.
  template <typename Request>
  std::expected<proto::Frame, ClientError> call(Request request) {
    request.request_id = ++last_request_id;
    const std::string bytes = proto::encode(request);
    for (int attempt = 0; attempt < options.attempts; ++attempt) {
      const int64_t deadline = steady_ms() + options.timeout_ms;
      // A DEALER with no usable connection (a broker that refused this
      // key's handshake) would block a send for ever: wait for room only
      // until the attempt's deadline.
      zmq::pollitem_t writable{socket.handle(), 0, ZMQ_POLLOUT, 0};
      if (zmq::poll(&writable, 1, std::chrono::milliseconds(options.timeout_ms)) != 1 ||
          !socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait))
        continue;
      while (true) {
        const int64_t left = deadline - steady_ms();
        if (left <= 0) break;
        zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(left));
        if (!(item.revents & ZMQ_POLLIN)) continue;
        zmq::message_t message;
        if (!socket.recv(message, zmq::recv_flags::dontwait)) continue;
        auto frame = proto::decode(std::string_view(static_cast<const char*>(message.data()), message.size()),
                                   proto::kMaxReplyValues);
        if (!frame) return std::unexpected(ClientError{"bad_frame", "undecodable reply: " + frame.error().message, 0});
        const uint64_t id = std::visit(
            [](const auto& f) -> uint64_t {
              if constexpr (requires { f.request_id; }) return f.request_id;
              else return 0;
            },
            *frame);
        if (auto* error = std::get_if<proto::ErrorFrame>(&*frame); error && (id == request.request_id || id == 0))
          return std::unexpected(ClientError{error->code, error->message, error->retry_after_ms});
        if (id == request.request_id) return std::move(*frame);
        // A late reply to an earlier request: ignore it.
      }
    }
    return std::unexpected(ClientError{"timeout", "no reply from the broker at " + endpoint + " after " +
                                                      std::to_string(options.attempts) + " attempts" +
                                                      (options.broker_key.empty()
                                                           ? ""
                                                           : " (a broker with CURVE answers nothing to a key it does not allow)"),
                                       0});
  }

  ClientOptions options;
  zmq::context_t context;
  zmq::socket_t socket;
  std::string endpoint;
  uint64_t last_request_id = 0;
};

Client::Client(std::string broker_endpoint, ClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(broker_endpoint), options)) {}
Client::~Client() = default;

int64_t Client::in_ms(int64_t delay_ms) { return wall_ms() + delay_ms; }

std::expected<EnqueueResult, ClientError> Client::enqueue(JobSpec job) {
  std::vector<JobSpec> one;
  one.push_back(std::move(job));
  auto results = enqueue_batch(std::move(one));
  if (!results) return std::unexpected(results.error());
  return std::move(results->front());
}

std::expected<std::vector<EnqueueResult>, ClientError> Client::enqueue_batch(std::vector<JobSpec> jobs) {
  if (jobs.empty() || jobs.size() > proto::kMaxBatch)
    return std::unexpected(ClientError{"bad_argument", "a batch holds 1..10000 jobs", 0});
  proto::Enqueue request;
  request.jobs.reserve(jobs.size());
  for (auto& job : jobs) {
    if (job.id.empty()) job.id = new_job_id();
    request.jobs.push_back(proto::NewJob{std::move(job.queue), std::move(job.id), std::move(job.type),
                                         proto::Bytes{std::move(job.payload)}, job.due_ms, job.max_attempts,
                                         job.backoff_base_ms, job.backoff_cap_ms});
  }
  auto frame = impl_->call(std::move(request));
  if (!frame) return std::unexpected(frame.error());
  auto* reply = std::get_if<proto::EnqueueReply>(&*frame);
  if (reply == nullptr || reply->results.size() != jobs.size())
    return std::unexpected(ClientError{"bad_frame", "unexpected reply to enqueue", 0});
  std::vector<EnqueueResult> out;
  for (auto& r : reply->results)
    out.push_back(EnqueueResult{std::move(r.id), static_cast<EnqueueResult::Status>(r.status), std::move(r.reason),
                                r.status == static_cast<uint8_t>(proto::EnqueueStatus::overloaded) ? reply->retry_after_ms : 0});
  return out;
}

std::expected<std::vector<QueueStats>, ClientError> Client::stats() {
  auto frame = impl_->call(proto::StatsRequest{});
  if (!frame) return std::unexpected(frame.error());
  auto* reply = std::get_if<proto::StatsReply>(&*frame);
  if (reply == nullptr) return std::unexpected(ClientError{"bad_frame", "unexpected reply to stats", 0});
  std::vector<QueueStats> out;
  for (const auto& q : reply->queues)
    out.push_back(QueueStats{q.queue, q.scheduled, q.waiting, q.in_flight, q.done, q.dead, q.accepted, q.retried,
                             q.stale_acks, q.next_due_ms, q.cancelled, q.purged});
  return out;
}

std::expected<std::optional<std::map<std::string, std::string>>, ClientError> Client::job(const std::string& id,
                                                                                           const std::string& queue) {
  auto frame = impl_->call(proto::JobRequest{0, id, queue});
  if (!frame) return std::unexpected(frame.error());
  auto* reply = std::get_if<proto::JobReply>(&*frame);
  if (reply == nullptr) return std::unexpected(ClientError{"bad_frame", "unexpected reply to job", 0});
  if (!reply->found) return std::optional<std::map<std::string, std::string>>{};
  return std::optional(std::move(reply->fields));
}

std::expected<AdminResult, ClientError> Client::admin(const AdminCommand& command) {
  auto frame = impl_->call(proto::AdminRequest{0, command.op, command.queue, command.ids, command.older_than_ms, command.limit});
  if (!frame) return std::unexpected(frame.error());
  auto* reply = std::get_if<proto::AdminReply>(&*frame);
  if (reply == nullptr) return std::unexpected(ClientError{"bad_frame", "unexpected reply to " + command.op, 0});
  return AdminResult{std::move(reply->rows), std::move(reply->summary)};
}

}  // namespace dueq
