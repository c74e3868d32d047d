#include "broker/inbound.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <spdlog/spdlog.h>

#include "common/names.hpp"

namespace dueq::broker {

namespace {
constexpr int64_t kFarFutureMs = 10LL * 365 * 86'400'000;  // due times beyond ~10 years are refused
constexpr int64_t kMaxBackoffMs = 30LL * 86'400'000;
}  // namespace

Result<void> validate_new_job(const proto::NewJob& job, int64_t now_ms) {
  if (auto ok = validate_queue_name(job.queue); !ok) return ok;
  if (auto ok = validate_job_id(job.id); !ok) return ok;
  if (auto ok = validate_job_type(job.type); !ok) return ok;
  if (job.due_ms < 0 || job.due_ms > now_ms + kFarFutureMs)
    return fail(Errc::bad_argument, "due time is negative or more than 10 years away");
  if (job.max_attempts > 1000) return fail(Errc::bad_argument, "max_attempts must be at most 1000");
  if (job.backoff_base_ms < 0 || job.backoff_cap_ms < 0 || job.backoff_base_ms > kMaxBackoffMs ||
      job.backoff_cap_ms > kMaxBackoffMs)
    return fail(Errc::bad_argument, "backoff must be between 0 and 30 days");
  if (job.payload.data.size() > proto::kMaxPayloadBytes) return fail(Errc::bad_argument, "payload exceeds 1 MiB");
  if (job.key.data.size() > proto::kMaxKeyBytes) return fail(Errc::bad_argument, "key exceeds 128 bytes");
  // A deadline already past is not refused: a resend of an accepted job
  // must be answered duplicate as the first ask was, however late it comes
  // (a new job with one expires when first leased).
  if (job.start_by_ms != 0) {
    if (job.start_by_ms < 0) return fail(Errc::bad_argument, "start_by_ms must not be negative");
    if (job.start_by_ms < job.due_ms) return fail(Errc::bad_argument, "start_by_ms is before the job's due time");
    if (job.start_by_ms > now_ms + kFarFutureMs) return fail(Errc::bad_argument, "start_by_ms is more than 10 years away");
  }
  if (auto ok = validate_trace_context(job.traceparent, job.tracestate); !ok) return ok;
  return validate_unique(job);
}

Result<void> validate_unique(const proto::NewJob& job) {
  using proto::UniqueUntil;
  if (job.unique_until == UniqueUntil::none) {
    if (!job.unique_key.data.empty() || job.unique_for_ms != 0)
      return fail(Errc::bad_argument, "unique_key and unique_for_ms need a unique_until");
    return {};
  }
  if (job.unique_until > UniqueUntil::debounce)
    return fail(Errc::bad_argument, "unique_until: 0..5 (none, waiting, started, done, period, debounce)");
  if (job.unique_key.data.empty() || job.unique_key.data.size() > proto::kMaxKeyBytes)
    return fail(Errc::bad_argument, "unique_key: 1..128 bytes");
  const bool timed = job.unique_until == UniqueUntil::period || job.unique_until == UniqueUntil::debounce;
  if (timed ? job.unique_for_ms < 1 || job.unique_for_ms > kFarFutureMs : job.unique_for_ms != 0)
    return fail(Errc::bad_argument, "unique_for_ms: 1 ms to 10 years with until period or debounce, else 0");
  return {};
}

bool Inbound::receive(int max_frames, uint64_t connections) {
  if (const int64_t now = clock_.steady_ms();
      marks_.size() < kMaxMarks && (marks_.empty() || now - marks_.back().at_ms >= kMarkSpacingMs))
    marks_.push_back({now, frames_read_});
  // Bytes are bounded per turn as frames are: what one round gathers (and
  // the broker holds until Redis answers) stays under kMaxBytesPerTurn plus
  // one frame, however many peers send at once.
  size_t bytes = 0;
  for (int n = 0; n < max_frames && bytes < kMaxBytesPerTurn; ++n) {
    // Taken before each read: when the socket is empty, every frame sent
    // before this moment has been read; a frame read now is stamped with
    // it, not with the start of a long batch.
    const int64_t heard_ms = clock_.steady_ms();
    std::vector<zmq::message_t> parts;
    if (!read_message(parts)) {
      all_read_before_ms_ = heard_ms;
      marks_.clear();
      return true;
    }
    bytes += take(parts, heard_ms);
  }
  // The socket hands out one message per peer in turn (ZeroMQ's fair
  // queuing) and queues at most about kQueuedFramesPerPeer per peer (its
  // high-water mark is checked lazily, in batches of half of it: twice is
  // the bound), so a frame queued at a mark has been read once this many
  // more frames were: a heartbeat waits behind a flood, not forever.
  const uint64_t drain_frames = std::max<uint64_t>(connections, 1) * 2 * kQueuedFramesPerPeer;
  while (!marks_.empty() && frames_read_ - marks_.front().frames_read >= drain_frames) {
    all_read_before_ms_ = std::max(all_read_before_ms_, marks_.front().at_ms);
    marks_.pop_front();
  }
  return false;
}

bool Inbound::read_message(std::vector<zmq::message_t>& parts) {
  zmq::message_t part;
  if (!router_.recv(part, zmq::recv_flags::dontwait)) return false;
  ++frames_read_;
  parts.push_back(std::move(part));
  while (parts.back().more()) {
    zmq::message_t next;
    (void)router_.recv(next);
    parts.push_back(std::move(next));
  }
  return true;
}

size_t Inbound::take(std::vector<zmq::message_t>& parts, int64_t heard_ms) {
  Peer peer{parts.front().to_string(), parts.size() == 3 && parts[1].size() == 0};
  if (parts.size() < 2 || parts.size() > 3) {
    reject(peer, Error{Errc::bad_frame, "expected one body frame"}, heard_ms);
    return 0;
  }
  auto& body = parts.back();
  auto sender = sender_grant(peer, body, heard_ms);
  if (!sender) return body.size();
  const Grant* grant = *sender;
  const std::string_view bytes(static_cast<const char*>(body.data()), body.size());
  if (standby_answer_) {
    // Clients try their next endpoint: nothing is decoded, let alone kept.
    outbox_.send(peer, proto::ErrorFrame{proto::peek_request_id(bytes), errc_name(Errc::not_leader), *standby_answer_, 0});
    return body.size();
  }
  auto frame = proto::decode(bytes);
  if (!frame) {
    reject(peer, frame.error(), heard_ms, proto::peek_request_id(bytes));
    return body.size();
  }
  if (grant != nullptr) {
    if (const std::string why = refusal(peer, *grant, *frame); !why.empty()) {
      access_.refused(grant->label(), fmt::format("{} frame ({})", proto::type_name(proto::type_of(*frame)), why),
                      heard_ms);
      outbox_.send(peer, proto::ErrorFrame{proto::request_id_of(*frame), errc_name(Errc::refused), why, 0});
      return body.size();
    }
  }
  route(peer, grant, std::move(*frame), heard_ms);
  return body.size();
}

void Inbound::route(const Peer& peer, const Grant* grant, proto::Frame&& frame, int64_t heard_ms) {
  std::visit(
      [&](auto&& f) {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, proto::Hello>) workers_.on_hello(peer, std::forward<decltype(f)>(f), heard_ms);
        else if constexpr (std::is_same_v<T, proto::Heartbeat>) workers_.on_heartbeat(peer, f, heard_ms);
        else if constexpr (std::is_same_v<T, proto::Received>) workers_.on_received(peer, f, heard_ms);
        else if constexpr (std::is_same_v<T, proto::Starting>) workers_.on_starting(peer, f, heard_ms);
        else if constexpr (std::is_same_v<T, proto::HandBack>) workers_.on_hand_back(peer, f, heard_ms);
        else if constexpr (std::is_same_v<T, proto::Results>) workers_.on_results(peer, std::move(f.items), heard_ms);
        else if constexpr (std::is_same_v<T, proto::Bye>) workers_.on_bye(peer, f, heard_ms);
        else if constexpr (std::is_same_v<T, proto::Progress>) workers_.on_progress(peer, std::forward<decltype(f)>(f));
        else if constexpr (std::is_same_v<T, proto::Enqueue>) on_enqueue(peer, std::forward<decltype(f)>(f), grant);
        else if constexpr (std::is_same_v<T, proto::GroupEnqueue>) on_group_enqueue(peer, std::forward<decltype(f)>(f), grant);
        else if constexpr (std::is_same_v<T, proto::StatsRequest>) stats_.on_stats(peer, f.request_id);
        else if constexpr (std::is_same_v<T, proto::AdminRequest>) {
          // The workers are this loop's state, not the store's.
          if (f.op == "workers") workers_.on_list(peer, f.request_id, heard_ms);
          else if (f.op == "queue_delete") remover_.on_request(peer, f.request_id, f.queue);
          else admin_.submit(peer, std::forward<decltype(f)>(f));
        } else if constexpr (std::is_same_v<T, proto::JobRequest>)
          admin_.submit(peer, std::forward<decltype(f)>(f));
        else if constexpr (std::is_same_v<T, proto::WaitRequest>)
          waits_.on_wait(peer, f);
        else reject(peer, Error{Errc::bad_frame, fmt::format("a {} frame is not sent to the broker", proto::type_name(T::kType))}, heard_ms);
      },
      std::move(frame));
}

std::optional<const Grant*> Inbound::sender_grant(Peer& peer, zmq::message_t& body, int64_t heard_ms) {
  if (!access_.enabled()) return nullptr;
  // Set by the ZAP handler at the handshake: the public key, in Z85.
  const char* user_id = zmq_msg_gets(body.handle(), "User-Id");
  const std::string public_key = user_id != nullptr ? user_id : "";
  if (const Grant* grant = access_.grant(public_key)) {
    peer.key_name = grant->name;
    peer.key_capacity = grant->role == Role::worker ? grant->capacity : 0;
    return grant;
  }
  peer.key_name = "";
  peer.key_capacity = 0;
  access_.refused(fmt::format("key {}", key_id(public_key)), "a frame (the key is no longer on the allow-list)", heard_ms);
  const std::string_view bytes(static_cast<const char*>(body.data()), body.size());
  outbox_.send(peer, proto::ErrorFrame{proto::peek_request_id(bytes), errc_name(Errc::refused), "this key is no longer allowed", 0});
  return std::nullopt;
}

std::string Inbound::refusal(const Peer& peer, const Grant& grant, proto::Frame& frame) const {
  const WorkerInfo* registered = workers_.registry().find(peer.routing_id);
  const bool worker_key = grant.role == Role::worker;
  return std::visit(
      [&](auto& f) -> std::string {
        using T = std::decay_t<decltype(f)>;
        constexpr bool worker_frame = std::is_same_v<T, proto::Hello> || std::is_same_v<T, proto::Heartbeat> ||
                                      std::is_same_v<T, proto::Received> || std::is_same_v<T, proto::Results> ||
                                      std::is_same_v<T, proto::Bye> || std::is_same_v<T, proto::Starting> ||
                                      std::is_same_v<T, proto::HandBack> || std::is_same_v<T, proto::Progress>;
        if constexpr (worker_frame) {
          if (!worker_key) return "only worker keys may act as workers";
          if (registered != nullptr && registered->key_name != grant.name) return "this routing id is another key's worker";
          if constexpr (std::is_same_v<T, proto::Hello>) {
            for (const auto& queue : f.queues)
              if (!grant.may_use(queue)) return fmt::format("this key may not serve queue '{}'", loggable(queue));
          }
          if constexpr (requires { f.capacity; })
            if (grant.capacity != 0) f.capacity = std::min(f.capacity, grant.capacity);
          return "";
        } else if constexpr (std::is_same_v<T, proto::Enqueue>) {
          return worker_key ? "worker keys may not enqueue" : "";
        } else if constexpr (std::is_same_v<T, proto::GroupEnqueue>) {
          if (worker_key) return "worker keys may not enqueue";
          if (!grant.may_use(f.queue)) return fmt::format("this key may not use queue '{}'", loggable(f.queue));
          return "";
        } else if constexpr (std::is_same_v<T, proto::WaitRequest>) {
          if (worker_key) return "worker keys may not wait for jobs";
          if (!grant.may_use(f.queue)) return fmt::format("this key may not use queue '{}'", loggable(f.queue));
          return "";
        } else if constexpr (std::is_same_v<T, proto::JobRequest>) {
          if (worker_key) return "worker keys may not look up jobs";
          if (f.queue.empty() && !grant.all_queues) return "name the queue of the job (this key may use only some queues)";
          if (!f.queue.empty() && !grant.may_use(f.queue)) return fmt::format("this key may not use queue '{}'", loggable(f.queue));
          return "";
        } else if constexpr (std::is_same_v<T, proto::AdminRequest>) {
          // A flow's or batch's status is read by its producers and by a
          // parent's handler (its children's results), not only operators.
          if (f.op == "group" && grant.role != Role::admin)
            return grant.may_use(f.queue) ? "" : fmt::format("this key may not use queue '{}'", loggable(f.queue));
          return grant.role == Role::admin ? "" : "only admin keys may read stats or run operator commands";
        } else if constexpr (std::is_same_v<T, proto::StatsRequest>) {
          return grant.role == Role::admin ? "" : "only admin keys may read stats or run operator commands";
        } else {
          return "";  // frames the broker does not take are answered by route()
        }
      },
      frame);
}

void Inbound::on_enqueue(const Peer& peer, proto::Enqueue&& enqueue, const Grant* grant) {
  EnqueueRequest request{peer, std::move(enqueue), {}};
  const int64_t now = clock_.wall_ms();
  request.outcomes.resize(request.frame.jobs.size());
  for (size_t i = 0; i < request.frame.jobs.size(); ++i) {
    auto& outcome = request.outcomes[i];
    outcome.id = request.frame.jobs[i].id;
    if (auto valid = validate_new_job(request.frame.jobs[i], now); !valid) {
      outcome.status = proto::EnqueueStatus::rejected;
      outcome.reason = valid.error().message;
    } else if (grant != nullptr && !grant->may_use(request.frame.jobs[i].queue)) {
      outcome.status = proto::EnqueueStatus::rejected;
      outcome.reason = fmt::format("refused: this key may not use queue '{}'", request.frame.jobs[i].queue);
      access_.refused(grant->label(),
                      fmt::format("a job for queue '{}'", request.frame.jobs[i].queue), clock_.steady_ms());
    }
  }
  enqueuer_.on_enqueue(std::move(request));
}

// A flow or batch is stored whole or not at all: one bad job refuses it.
void Inbound::on_group_enqueue(const Peer& peer, proto::GroupEnqueue&& request, const Grant*) {
  const int64_t now = clock_.wall_ms();
  auto refuse = [&](std::string reason, int64_t index) {
    outbox_.send(peer, proto::GroupEnqueueReply{request.request_id, proto::GroupStatus::rejected, std::move(reason), index, 0});
  };
  if (auto problem = group_problem(request)) return refuse(std::move(problem->reason), problem->job_index);
  for (size_t i = 0; i < request.jobs.size(); ++i) {
    auto& job = request.jobs[i].job;
    if (job.queue.empty()) job.queue = request.queue;
    if (auto valid = validate_new_job(job, now); !valid) return refuse(valid.error().message, static_cast<int64_t>(i));
  }
  group_enqueuer_.on_request(peer, std::move(request));
}

void Inbound::reject(const Peer& peer, const Error& error, int64_t heard_ms, uint64_t request_id) {
  ++frames_rejected_;
  if (auto held_back = reject_log_.admit(peer.routing_id, heard_ms))
    spdlog::warn("rejected frame from peer {}: {} ({} rejected in total, {} lines about this peer held back)",
                 loggable(peer.routing_id), loggable(error.message, 256), frames_rejected_, *held_back);
  outbox_.send(peer, proto::ErrorFrame{request_id, errc_name(error.code), error.message, 0});
}

}  // namespace dueq::broker
