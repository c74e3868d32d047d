#include "broker/broker.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <utility>
#include <set>

#include "broker/auditor.hpp"
#include "common/clock.hpp"
#include "common/ids.hpp"
#include "common/names.hpp"
#include "common/unique_fd.hpp"
#include "common/redis_url.hpp"

namespace dueq::broker {

namespace {

constexpr int64_t kMaxSleepMs = 5'000;      // upper bound on one wait; nothing relies on it
constexpr int64_t kMaxReconnectMs = 5'000;
constexpr int64_t kBadFrameLogIntervalMs = 10'000;
constexpr int64_t kFarFutureMs = 10LL * 365 * 86'400'000;  // due times beyond ~10 years are refused
constexpr int64_t kMaxBackoffMs = 30LL * 86'400'000;
constexpr size_t kEnqueueChunk = 1000;                      // enqueue.lua takes at most 1000 jobs
constexpr size_t kResultChunk = 5000;                       // ack/nack take at most 5000
constexpr size_t kExtendChunk = 1000;                       // keeps one extend call to a few ms
constexpr size_t kRequeuePerTurn = 500;                     // lost workers' jobs returned per queue per turn
constexpr int kSweepLimit = 5000;                          // done/cancelled entries removed per sweep call
constexpr int64_t kSweepIntervalMs = 1000;

int64_t min_known(int64_t a, int64_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

}  // namespace

Broker::Broker(BrokerConfig config)
    : config_(std::move(config)),
      store_(parse_redis_url(config_.redis_url).value_or(RedisAddress{})),
      context_(1),
      router_(context_, zmq::socket_type::router),
      broker_id_(new_instance_id()) {}

Broker::~Broker() { router_.close(); }

Result<void> Broker::start() {
  auto address = parse_redis_url(config_.redis_url);
  if (!address) return std::unexpected(address.error());
  if (auto ok = validate_config(config_); !ok) return ok;

  int64_t backoff = 100;
  while (true) {
    auto ok = store_.connect();
    if (ok) break;
    spdlog::warn("waiting for Redis at {}: {}", address->describe(), ok.error().message);
    ::usleep(static_cast<useconds_t>(backoff * 1000));
    backoff = std::min<int64_t>(backoff * 2, kMaxReconnectMs);
  }
  if (auto ok = store_.check_durability_settings(); !ok) {
    if (!config_.allow_unsafe_redis) return ok;
    spdlog::warn("{} (continuing: --allow-unsafe-redis)", ok.error().message);
  }
  if (auto advice = store_.settings_advice(); advice && !advice->empty()) spdlog::warn("Redis: {}", *advice);

  router_.set(zmq::sockopt::linger, 0);
  router_.set(zmq::sockopt::rcvhwm, 100'000);
  router_.set(zmq::sockopt::sndhwm, 100'000);
  try {
    router_.bind(config_.listen);
  } catch (const zmq::error_t& e) {
    return fail(Errc::bad_argument, fmt::format("cannot listen on {}: {}", config_.listen, e.what()));
  }
  bound_endpoint_ = router_.get(zmq::sockopt::last_endpoint);

  auto known = store_.known_queues();
  if (!known) return std::unexpected(known.error());
  for (const auto& name : *known) {
    if (!validate_queue_name(name)) continue;
    Queue& q = queue(name);
    q.registered = true;
    // After a restart the broker does not know what is due or leased: the
    // first round promotes and reclaims, and their replies give the times.
    q.next_due_ms = 0;
    q.next_deadline_ms = 0;
    q.maybe_ready = true;
  }
  // Stores written before the schedule filter existed get one before any
  // enqueue trusts it; stores written before the schedule was partitioned
  // keep their scheduled jobs in one sorted set: move them over before
  // anything reads the schedule.
  for (const auto& [name, q] : queues_) {
    auto built = store_.build_missing_schedule_filter(name);
    if (!built) return std::unexpected(built.error());
    if (*built) spdlog::info("queue '{}': built the schedule filter", name);
    auto moved = store_.migrate_legacy_schedule(name);
    if (!moved) return std::unexpected(moved.error());
    if (*moved > 0) spdlog::info("queue '{}': moved {} scheduled jobs into the partitioned schedule", name, *moved);
  }
  // Leases written by a previous broker may run for a full TTL; workers that
  // still hold those jobs report them within the grace period and get them
  // extended, the rest expire then and are re-delivered.
  const int64_t grace_deadline = wall_ms() + config_.worker_timeout_ms + config_.delivery_timeout_ms;
  for (const auto& [name, q] : queues_) {
    while (true) {
      Round round;
      round.cap_leases(name, grace_deadline, config_.reclaim_batch);
      auto replies = store_.execute(round);
      if (!replies) return std::unexpected(replies.error());
      auto capped = Store::parse_integers((*replies)[0].get());
      if (!capped) return std::unexpected(capped.error());
      if (capped->empty() || (*capped)[0] < config_.reclaim_batch) break;
    }
  }
  reconciler_ = std::make_unique<Reconciler>(*address, config_.reconcile_interval_ms);
  reconciler_->start();
  spdlog::info("broker {} listening on {}, Redis {}, {} known queues", broker_id_, bound_endpoint_,
               address->describe(), queues_.size());
  return {};
}

Broker::Queue& Broker::queue(const std::string& name) {
  auto it = queues_.find(name);
  if (it != queues_.end()) return it->second;
  Queue q;
  q.name = name;
  return queues_.emplace(name, std::move(q)).first->second;
}

template <typename T>
void Broker::send(const Peer& peer, const T& frame) {
  const std::string body = proto::encode(frame);
  // ROUTER drops what it cannot route (peer gone): that is the behaviour we
  // want, since every reply here is either retried by its sender or resent.
  router_.send(zmq::buffer(peer.routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  if (peer.req_envelope) router_.send(zmq::const_buffer(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  router_.send(zmq::buffer(body), zmq::send_flags::dontwait);
}

Result<void> Broker::run(int signal_fd) {
  // zmq_poll counts in whole milliseconds; a timerfd set to the exact due
  // millisecond wakes the loop at it instead of up to a millisecond after.
  UniqueFd timer(::timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC));
  if (timer.get() < 0) return fail(Errc::internal, "timerfd_create failed");
  std::vector<zmq::pollitem_t> items = {
      {router_.handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, signal_fd, ZMQ_POLLIN, 0},
      {nullptr, timer.get(), ZMQ_POLLIN, 0},
  };
  while (true) {
    int64_t now = wall_ms();
    const int64_t wake = stopping_ ? now : next_wake(now);
    long timeout_ms = 0;
    if (wake > now) {
      itimerspec at{};
      at.it_value.tv_sec = wake / 1000;
      at.it_value.tv_nsec = (wake % 1000) * 1'000'000;
      ::timerfd_settime(timer.get(), TFD_TIMER_ABSTIME, &at, nullptr);
      timeout_ms = -1;
    }
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return fail(Errc::internal, std::string("poll failed: ") + e.what());
    }
    if (items[2].revents & ZMQ_POLLIN) {
      uint64_t expirations = 0;
      [[maybe_unused]] auto n = ::read(timer.get(), &expirations, sizeof expirations);
    }
    if (items[1].revents & ZMQ_POLLIN) {
      signalfd_siginfo info{};
      if (::read(signal_fd, &info, sizeof info) == sizeof info) {
        spdlog::info("signal {}: stopping; applying {} results held", info.ssi_signo, results_.size());
        stopping_ = true;
      }
    }
    now = wall_ms();
    if (!stopping_) {
      receive_frames(now);
      expire_silent_workers(now);
    }
    if (!store_.connected()) reconnect(now);
    if (store_.connected()) pump_rounds(now);
    else answer_enqueues_unavailable("Redis is unavailable");
    if (rounds_.empty())
      for (auto& [peer, frame] : std::exchange(deferred_requests_, {})) on_frame(peer, std::move(frame), wall_ms());
    if (stopping_ && rounds_.empty()) {
      if (results_.empty()) break;
      if (!store_.connected()) {
        spdlog::error("stopping with {} results not applied: Redis unavailable (workers resend them)", results_.size());
        break;
      }
    }
  }
  spdlog::info("broker stopped");
  return {};
}

void Broker::receive_frames(int64_t now) {
  for (int n = 0; n < config_.max_frames_per_turn; ++n) {
    std::vector<zmq::message_t> parts;
    zmq::message_t part;
    auto got = router_.recv(part, zmq::recv_flags::dontwait);
    if (!got) break;
    parts.push_back(std::move(part));
    while (parts.back().more()) {
      zmq::message_t next;
      (void)router_.recv(next);
      parts.push_back(std::move(next));
    }
    Peer peer{parts.front().to_string(), parts.size() == 3 && parts[1].size() == 0};
    if (parts.size() < 2 || parts.size() > 3) {
      on_bad_frame(peer, Error{Errc::bad_frame, "expected one body frame"}, now);
      continue;
    }
    const auto& body = parts.back();
    auto frame = proto::decode(std::string_view(static_cast<const char*>(body.data()), body.size()));
    if (!frame) {
      on_bad_frame(peer, frame.error(), now);
      continue;
    }
    on_frame(peer, std::move(*frame), now);
  }
}

void Broker::receive_frames_until_readable(int redis_fd) {
  if (stopping_) return;
  std::array<zmq::pollitem_t, 2> items = {{{router_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, redis_fd, ZMQ_POLLIN, 0}}};
  // Past the limit the blocking read takes over (and times out if Redis hangs).
  const int64_t give_up = wall_ms() + 1'000;
  for (int64_t now = wall_ms(); now < give_up; now = wall_ms()) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(give_up - now));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) break;
      continue;
    }
    if (items[1].revents & ZMQ_POLLIN) break;
    if (items[0].revents & ZMQ_POLLIN) receive_frames(now);
  }
}

void Broker::on_frame(const Peer& peer, proto::Frame&& frame, int64_t now) {
  if (!rounds_.empty() && (std::holds_alternative<proto::JobRequest>(frame) || std::holds_alternative<proto::AdminRequest>(frame))) {
    deferred_requests_.emplace_back(peer, std::move(frame));
    return;
  }
  std::visit(
      [&](auto&& f) {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, proto::Hello>) on_hello(peer, std::move(f), now);
        else if constexpr (std::is_same_v<T, proto::Heartbeat>) on_heartbeat(peer, f, now);
        else if constexpr (std::is_same_v<T, proto::Results>) on_results(peer, std::move(f));
        else if constexpr (std::is_same_v<T, proto::Bye>) on_bye(peer, f, now);
        else if constexpr (std::is_same_v<T, proto::Enqueue>) on_enqueue(peer, std::move(f), now);
        else if constexpr (std::is_same_v<T, proto::StatsRequest>) stats_requests_.emplace_back(peer, f.request_id);
        else if constexpr (std::is_same_v<T, proto::JobRequest>) on_job_request(peer, f);
        else if constexpr (std::is_same_v<T, proto::AdminRequest>) on_admin(peer, f, now);
        else on_bad_frame(peer, Error{Errc::bad_frame, fmt::format("a {} frame is not sent to the broker", proto::type_name(T::kType))}, now);
      },
      std::move(frame));
}

void Broker::on_bad_frame(const Peer& peer, const Error& error, int64_t now) {
  ++frames_rejected_;
  auto& last = bad_frame_logged_at_[peer.routing_id];
  if (now - last >= kBadFrameLogIntervalMs) {
    last = now;
    spdlog::warn("rejected frame from peer {:?}: {} ({} rejected in total)", peer.routing_id, error.message, frames_rejected_);
  }
  if (bad_frame_logged_at_.size() > 10'000) bad_frame_logged_at_.clear();
  send(peer, proto::ErrorFrame{0, errc_name(error.code), error.message, 0});
}

void Broker::on_hello(const Peer& peer, proto::Hello&& hello, int64_t now) {
  proto::Welcome welcome{broker_id_, static_cast<uint32_t>(config_.heartbeat_ms)};
  for (const auto& name : hello.queues) queue(name);
  spdlog::info("worker {} ({} pid {}) joined: queues [{}], capacity {}, holding {}", hello.worker_id, hello.host,
               hello.pid, fmt::join(hello.queues, ","), hello.capacity, hello.held.size());
  workers_.upsert(peer.routing_id, WorkerInfo{hello.worker_id, hello.queues, hello.capacity, false, now});
  adopt_held(peer.routing_id, hello.held, now);
  send(peer, welcome);
}

void Broker::adopt_held(const std::string& routing_id, const std::vector<proto::JobRef>& held, int64_t now) {
  for (const auto& ref : held) {
    InflightJob* job = inflight_.find(ref.queue, ref.id);
    if (job == nullptr || job->token != ref.token) {
      // A job leased before this broker started (or re-leased since): Redis
      // decides by token whether this worker's delivery is still current.
      if (job == nullptr) inflight_.add(InflightJob{ref.queue, ref.id, ref.token, routing_id, now});
      extends_[ref.queue].push_back(TokenRef{ref.id, ref.token});
      continue;
    }
    inflight_.assign(*job, routing_id);
    if (job->lease_deadline_ms - now < config_.lease_ttl_ms / 2) extends_[ref.queue].push_back(TokenRef{ref.id, ref.token});
  }
}

void Broker::on_heartbeat(const Peer& peer, const proto::Heartbeat& heartbeat, int64_t now) {
  WorkerInfo* worker = workers_.find(peer.routing_id);
  if (worker == nullptr) {
    // The broker restarted or declared this worker dead: it must say hello
    // again, reporting what it holds.
    send(peer, proto::ErrorFrame{0, "unknown_worker", "say hello first", 0});
    return;
  }
  worker->last_seen_ms = now;
  worker->draining = heartbeat.draining;
  if (heartbeat.capacity > 0) worker->capacity = heartbeat.capacity;
  adopt_held(peer.routing_id, heartbeat.held, now);
  send(peer, proto::Pong{broker_id_});
}

void Broker::on_results(const Peer& peer, proto::Results&& results) {
  for (auto& item : results.items) {
    // Credit comes back now; Redis decides (by token) whether it counts.
    inflight_.remove(item.queue, item.id, item.token);
    results_.push_back(PendingResult{peer, std::move(item)});
  }
  if (WorkerInfo* w = workers_.find(peer.routing_id)) w->last_seen_ms = wall_ms();
}

void Broker::on_bye(const Peer& peer, const proto::Bye& bye, int64_t now) {
  for (const auto& ref : bye.unstarted) {
    inflight_.remove(ref.queue, ref.id, ref.token);
    requeues_[ref.queue].push_back(NackItem{ref.id, ref.token, NackMode::handed_back, "handed back by a stopping worker", 0});
  }
  // It still runs what it started: keep it (and its leases) until its
  // heartbeats stop, but send it nothing new.
  if (WorkerInfo* w = workers_.find(peer.routing_id)) {
    w->draining = true;
    w->last_seen_ms = now;
  }
}

void Broker::forget_worker(const std::string& routing_id, const char* reason, int64_t) {
  WorkerInfo* w = workers_.find(routing_id);
  if (w == nullptr) return;
  auto held = inflight_.take_held_by(routing_id);
  spdlog::info("worker {} {}; re-delivering {} jobs it held", w->worker_id, reason, held.size());
  for (auto& job : held)
    requeues_[job.queue].push_back(NackItem{job.id, job.token, NackMode::now, "worker lost (no heartbeat)", 0});
  workers_.remove(routing_id);
}

void Broker::expire_silent_workers(int64_t now) {
  for (const auto& rid : workers_.silent_since(now - config_.worker_timeout_ms)) forget_worker(rid, "stopped heartbeating", now);
}

void Broker::on_enqueue(const Peer& peer, proto::Enqueue&& enqueue, int64_t now) {
  EnqueueRequest request{peer, std::move(enqueue), {}};
  size_t valid_jobs = 0;
  request.outcomes.resize(request.frame.jobs.size());
  for (size_t i = 0; i < request.frame.jobs.size(); ++i) {
    auto& job = request.frame.jobs[i];
    auto& outcome = request.outcomes[i];
    outcome.id = job.id;
    Result<void> valid = validate_queue_name(job.queue);
    if (valid) valid = validate_job_id(job.id);
    if (valid) valid = validate_job_type(job.type);
    if (valid && (job.due_ms < 0 || job.due_ms > now + kFarFutureMs)) valid = fail(Errc::bad_argument, "due time is negative or more than 10 years away");
    if (valid && job.max_attempts > 1000) valid = fail(Errc::bad_argument, "max_attempts must be at most 1000");
    if (valid && (job.backoff_base_ms < 0 || job.backoff_cap_ms < 0 || job.backoff_base_ms > kMaxBackoffMs ||
                  job.backoff_cap_ms > kMaxBackoffMs))
      valid = fail(Errc::bad_argument, "backoff must be between 0 and 30 days");
    if (valid && job.payload.data.size() > proto::kMaxPayloadBytes) valid = fail(Errc::bad_argument, "payload exceeds 1 MiB");
    if (!valid) {
      outcome.status = static_cast<uint8_t>(proto::EnqueueStatus::rejected);
      outcome.reason = valid.error().message;
    } else {
      ++valid_jobs;
    }
  }
  if (valid_jobs == 0) {
    send(peer, proto::EnqueueReply{request.frame.request_id, std::move(request.outcomes), 0});
    return;
  }
  enqueues_.push_back(std::move(request));
}

void Broker::on_job_request(const Peer& peer, const proto::JobRequest& request) {
  proto::JobReply reply{request.request_id, false, {}};
  if (!store_.connected()) {
    send(peer, proto::ErrorFrame{request.request_id, "unavailable", "Redis is unavailable", 1000});
    return;
  }
  std::vector<std::string> candidates;
  if (!request.queue.empty()) candidates.push_back(request.queue);
  else
    for (const auto& [name, q] : queues_) candidates.push_back(name);
  for (const auto& name : candidates) {
    auto fields = store_.job_fields(name, request.id);
    if (!fields) {
      send(peer, proto::ErrorFrame{request.request_id, "unavailable", fields.error().message, 1000});
      return;
    }
    if (!fields->empty()) {
      reply.found = true;
      reply.fields = std::move(*fields);
      reply.fields["queue"] = name;
      reply.fields["id"] = request.id;
      break;
    }
  }
  send(peer, reply);
}

bool Broker::has_work_now() const {
  if (!enqueues_.empty() || !results_.empty() || !extends_.empty() || !requeues_.empty() || !stats_requests_.empty() ||
      !rounds_.empty())
    return true;
  for (const auto& [name, q] : queues_)
    if (q.maybe_ready && credit(name) > 0) return true;
  return false;
}

int64_t Broker::credit(const std::string& queue) const {
  int64_t total = -reserved_leases(queue);
  for (const auto& [rid, free] : workers_.free_slots(queue, [&](const std::string& w) { return inflight_.count_for_worker(w); }))
    total += free;
  return total;
}

int64_t Broker::reserved_leases(const std::string& queue) const {
  int64_t n = 0;
  for (const auto& round : rounds_)
    for (const auto& calls : round.queue_calls)
      if (calls.queue == queue) n += calls.lease_count;
  return n;
}

int64_t Broker::next_wake(int64_t now) const {
  if (!store_.connected()) return std::max(now, reconnect_at_ms_);
  if (has_work_now()) return now;
  int64_t wake = now + kMaxSleepMs;
  for (const auto& [name, q] : queues_) {
    if (q.next_due_ms >= 0) wake = std::min(wake, q.next_due_ms);
    if (q.next_deadline_ms >= 0) wake = std::min(wake, q.next_deadline_ms);
  }
  if (workers_.size() > 0) wake = std::min(wake, workers_.oldest_seen_ms() + config_.worker_timeout_ms + 1);
  return wake;
}

void Broker::reconnect(int64_t now) {
  if (now < reconnect_at_ms_) return;
  auto ok = store_.connect();
  if (!ok) {
    spdlog::warn("Redis unavailable, retrying in {} ms: {}", reconnect_backoff_ms_, ok.error().message);
    reconnect_at_ms_ = now + reconnect_backoff_ms_;
    reconnect_backoff_ms_ = std::min(reconnect_backoff_ms_ * 2, kMaxReconnectMs);
    return;
  }
  spdlog::info("Redis connection restored");
  reconnect_backoff_ms_ = 100;
  // Whatever happened while away (a restart, a failover) the replies of the
  // next round bring the schedule and lease times up to date.
  for (auto& [name, q] : queues_) {
    q.next_due_ms = 0;
    q.next_deadline_ms = 0;
    q.maybe_ready = true;
  }
}

void Broker::answer_enqueues_unavailable(const std::string& why) {
  for (auto& request : enqueues_) {
    proto::ErrorFrame error{request.frame.request_id, "unavailable", why + "; nothing from this request was accepted",
                            static_cast<uint32_t>(reconnect_backoff_ms_)};
    send(request.producer, error);
  }
  enqueues_.clear();
  extends_.clear();
  for (const auto& [peer, request_id] : stats_requests_)
    send(peer, proto::ErrorFrame{request_id, "unavailable", why + "; the broker is not ready",
                                 static_cast<uint32_t>(reconnect_backoff_ms_)});
  stats_requests_.clear();
}

// Keeps Redis busy: once the oldest round's reply is readable the next round
// is sent before the broker reads and applies the reply, so Redis runs round
// N+1 while the broker applies round N (at most two rounds outstanding).
void Broker::pump_rounds(int64_t now) {
  if (rounds_.empty()) send_round(now);
  if (rounds_.empty()) return;
  if (!store_.replies_buffered()) receive_frames_until_readable(store_.socket_fd());
  send_round(wall_ms());
  if (rounds_.empty()) return;  // sending failed: every outstanding round failed with it
  auto replies = store_.receive();
  if (!replies) {
    fail_rounds(replies.error());
    return;
  }
  SentRound oldest = std::move(rounds_.front());
  rounds_.pop_front();
  apply_round(oldest, *replies);
}

void Broker::send_round(int64_t now) {
  // JOB/ADMIN requests read Redis directly: let the outstanding round finish.
  if (rounds_.size() >= 2 || !deferred_requests_.empty()) return;
  Round round;
  auto sent = build_round(now, round);
  if (!sent) return;
  rounds_.push_back(std::move(*sent));
  if (auto ok = store_.send(round); !ok) fail_rounds(ok.error());
}

// The connection broke: no outstanding round is known to have been applied.
// Results are kept and retried; producers are told to retry (same ids are
// safe: a stored job is answered "duplicate").
void Broker::fail_rounds(const Error& error) {
  spdlog::error("Redis round failed: {}; results are kept and retried", error.message);
  for (auto& round : rounds_) {
    for (auto& pending : round.results) results_.push_back(std::move(pending));
    for (auto& request : round.enqueues) enqueues_.push_back(std::move(request));
    for (auto& request : round.stats_requests) stats_requests_.push_back(std::move(request));
  }
  rounds_.clear();
  store_.disconnect();
  reconnect_at_ms_ = wall_ms();  // try once at once, then back off
  answer_enqueues_unavailable("Redis connection lost while writing");
}

std::optional<Broker::SentRound> Broker::build_round(int64_t now, Round& round) {
  using EnqueueCall = SentRound::EnqueueCall;
  using ResultCall = SentRound::ResultCall;
  using QueueCalls = SentRound::QueueCalls;
  SentRound sent;
  sent.now = now;
  // The round owns the requests it answers; frames that arrive while it is
  // in Redis gather for the next one. (Enqueue calls point into the owned
  // requests' job lists, which stay put when the vector is moved.)
  sent.enqueues = std::exchange(enqueues_, {});
  sent.results = std::exchange(results_, {});
  sent.stats_requests = std::exchange(stats_requests_, {});
  auto& enqueue_calls = sent.enqueue_calls;
  auto& result_calls = sent.result_calls;
  auto& requeue_calls = sent.requeue_calls;
  auto& extend_calls = sent.extend_calls;
  auto& queue_calls = sent.queue_calls;

  // Enqueues, grouped by queue, at most kEnqueueChunk jobs per script call.
  {
    std::map<std::string, EnqueueCall> open;
    for (size_t r = 0; r < sent.enqueues.size(); ++r) {
      const auto& request = sent.enqueues[r];
      for (size_t i = 0; i < request.frame.jobs.size(); ++i) {
        if (request.outcomes[i].status == static_cast<uint8_t>(proto::EnqueueStatus::rejected)) continue;
        const auto& job = request.frame.jobs[i];
        auto& call = open[job.queue];
        call.queue = job.queue;
        call.slots.push_back({r, i});
        call.jobs.push_back(&job);
        if (call.jobs.size() == kEnqueueChunk) {
          enqueue_calls.push_back(std::move(call));
          open.erase(job.queue);
        }
      }
    }
    for (auto& [name, call] : open) enqueue_calls.push_back(std::move(call));
    for (auto& call : enqueue_calls) {
      Queue& q = queue(call.queue);
      if (!q.registered) round.command(Command{"SADD", kQueuesKey, call.queue});
      const auto& policy = config_.policy(call.queue);
      call.reply = round.enqueue(call.queue, call.jobs, now, policy.max_attempts, policy.max_backlog);
    }
  }
  // Optional: confirm to producers only once replicas have the writes.
  if (config_.min_replicas > 0 && !enqueue_calls.empty())
    sent.wait_reply = round.command(Command{"WAIT", std::to_string(config_.min_replicas), std::to_string(config_.replica_timeout_ms)});

  // Results from workers, split into acks and nacks per queue.
  {
    std::map<std::pair<std::string, bool>, ResultCall> open;
    auto close = [&](ResultCall& call) {
      const auto& policy = config_.policy(call.queue);
      if (call.ack) {
        std::vector<TokenRef> items;
        for (size_t i : call.results) items.push_back({sent.results[i].result.id, sent.results[i].result.token});
        call.reply = round.ack(call.queue, now, policy.done_retention_s, items);
      } else {
        std::vector<NackItem> items;
        std::uniform_real_distribution<double> jitter(0.0, 1.0);
        for (size_t i : call.results) {
          const auto& r = sent.results[i].result;
          const auto mode = r.outcome == static_cast<uint8_t>(proto::Outcome::failed_final) ? NackMode::dead
                            : r.outcome == static_cast<uint8_t>(proto::Outcome::cancelled) ? NackMode::cancel
                                                                                          : NackMode::retry;
          items.push_back({r.id, r.token, mode, r.error.empty() ? "failed" : r.error, jitter(rng_)});
        }
        call.reply = round.nack(call.queue, now, policy.backoff_base_ms, policy.backoff_cap_ms, policy.done_retention_s, items);
      }
      result_calls.push_back(std::move(call));
    };
    for (size_t i = 0; i < sent.results.size(); ++i) {
      const auto& r = sent.results[i].result;
      const bool ack = r.outcome == static_cast<uint8_t>(proto::Outcome::done);
      auto key = std::make_pair(r.queue, ack);
      auto& call = open[key];
      call.queue = r.queue;
      call.ack = ack;
      call.results.push_back(i);
      if (call.results.size() == kResultChunk) {
        close(call);
        open.erase(key);
      }
    }
    for (auto& [key, call] : open) close(call);
  }

  // Jobs of lost workers go back at once (still counted as an attempt). A
  // mass failure is spread over turns: at most kRequeuePerTurn per queue per
  // round trip, so Redis is never blocked by one huge script call.
  for (auto it = requeues_.begin(); it != requeues_.end();) {
    auto& [name, items] = *it;
    const size_t take = std::min(items.size(), kRequeuePerTurn);
    std::vector<NackItem> chunk(std::make_move_iterator(items.begin()), std::make_move_iterator(items.begin() + take));
    items.erase(items.begin(), items.begin() + take);
    const auto& policy = config_.policy(name);
    requeue_calls.emplace_back(
        round.nack(name, now, policy.backoff_base_ms, policy.backoff_cap_ms, policy.done_retention_s, chunk), name);
    it = items.empty() ? requeues_.erase(it) : std::next(it);
  }

  // Lease extensions for jobs workers report holding.
  const int64_t extended_deadline = now + config_.lease_ttl_ms;
  sent.extended_deadline = extended_deadline;
  for (auto& [name, items] : extends_) {
    for (size_t i = 0; i < items.size(); i += kExtendChunk) {
      std::vector<TokenRef> chunk(items.begin() + i, items.begin() + std::min(items.size(), i + kExtendChunk));
      const size_t reply = round.extend(name, extended_deadline, chunk);
      extend_calls.push_back({reply, name, std::move(chunk)});
    }
  }
  extends_.clear();

  // Promotion, reclaim and leases per queue. Promote and reclaim come before
  // the lease in the same pipeline, so the lease sees what they moved.
  const int64_t lease_deadline = now + config_.delivery_timeout_ms;
  sent.lease_deadline = lease_deadline;
  std::set<std::string> enqueued_to;
  for (const auto& call : enqueue_calls) enqueued_to.insert(call.queue);
  for (auto& [name, q] : queues_) {
    QueueCalls calls{name, {}, {}, {}, {}, 0};
    if (q.next_due_ms >= 0 && q.next_due_ms <= now) calls.promote = round.promote(name, now, config_.promote_batch);
    if (q.next_deadline_ms >= 0 && q.next_deadline_ms <= now) {
      calls.reclaim = round.reclaim(name, now, config_.reclaim_batch, config_.policy(name).done_retention_s);
      inflight_.expire(now);
    }
    const int64_t free = credit(name);
    const bool maybe_ready = q.maybe_ready || calls.promote || calls.reclaim || enqueued_to.contains(name) ||
                             std::any_of(requeue_calls.begin(), requeue_calls.end(), [&](auto& c) { return c.second == name; }) ||
                             std::any_of(result_calls.begin(), result_calls.end(), [&](auto& c) { return c.queue == name && !c.ack; });
    if (free > 0 && maybe_ready && !stopping_) {
      calls.lease_count = static_cast<int>(std::min<int64_t>(free, config_.lease_batch));
      calls.lease = round.lease(name, lease_deadline, calls.lease_count);
    }
    if (const int64_t retention_s = config_.policy(name).done_retention_s; retention_s > 0 && now >= q.next_sweep_ms)
      calls.sweep = round.sweep(name, now - retention_s * 1000, kSweepLimit);
    if (calls.promote || calls.reclaim || calls.lease || calls.sweep) queue_calls.push_back(std::move(calls));
  }

  if (!sent.stats_requests.empty())
    for (const auto& [name, q] : queues_) {
      sent.stats_replies.push_back(round.stats(name));
      sent.stats_queues.push_back(name);
    }

  if (round.empty()) {
    // No queue yet: the answer to a stats request is an empty list.
    for (const auto& [peer, request_id] : sent.stats_requests)
      send(peer, proto::StatsReply{request_id, {}, static_cast<uint32_t>(workers_.size())});
    return std::nullopt;
  }
  return sent;
}

void Broker::apply_round(SentRound& sent, std::vector<ReplyPtr>& rs) {
  const int64_t now = sent.now;
  auto script_failed = [&](size_t index, const char* what) {
    if (auto err = reply_error(rs[index].get()); !err.empty()) {
      spdlog::error("{} script failed: {}", what, err);
      return true;
    }
    return false;
  };

  bool replicated = true;
  if (sent.wait_reply) {
    const redisReply* r = rs[*sent.wait_reply].get();
    replicated = r->type == REDIS_REPLY_INTEGER && r->integer >= config_.min_replicas;
    if (!replicated)
      spdlog::warn("WAIT: only {} of {} replicas confirmed; producers are told to retry",
                   r->type == REDIS_REPLY_INTEGER ? r->integer : -1, config_.min_replicas);
  }
  for (auto& call : sent.enqueue_calls) {
    Queue& q = queue(call.queue);
    q.registered = true;
    auto statuses = Store::parse_integers(rs[call.reply].get());
    for (size_t j = 0; j < call.slots.size(); ++j) {
      auto& request = sent.enqueues[call.slots[j].request];
      auto& outcome = request.outcomes[call.slots[j].position];
      if (!statuses || statuses->size() != call.slots.size()) {
        outcome.status = static_cast<uint8_t>(proto::EnqueueStatus::rejected);
        outcome.reason = "store error: " + (statuses ? std::string("bad reply") : statuses.error().message);
      } else if ((*statuses)[j] == 2) {
        outcome.status = static_cast<uint8_t>(proto::EnqueueStatus::overloaded);
        outcome.reason = fmt::format("queue '{}' has {} or more jobs due and unfinished; retry later", call.queue,
                                     config_.policy(call.queue).max_backlog);
      } else {
        outcome.status = static_cast<uint8_t>((*statuses)[j] == 1 ? proto::EnqueueStatus::accepted : proto::EnqueueStatus::duplicate);
        const int64_t due = call.jobs[j]->due_ms;
        if (due > now) q.next_due_ms = min_known(q.next_due_ms, due);
        else q.maybe_ready = true;
      }
    }
  }
  for (auto& request : sent.enqueues) {
    if (!replicated) {
      // Written on the master but not confirmed by enough replicas: not
      // "accepted". A retry with the same ids is answered "duplicate".
      send(request.producer, proto::ErrorFrame{request.frame.request_id, "unavailable",
                                               fmt::format("not confirmed by {} replicas within {} ms; retry (same ids are safe)",
                                                           config_.min_replicas, config_.replica_timeout_ms),
                                               static_cast<uint32_t>(config_.overload_retry_after_ms)});
      continue;
    }
    const bool overloaded = std::any_of(request.outcomes.begin(), request.outcomes.end(), [](const auto& o) {
      return o.status == static_cast<uint8_t>(proto::EnqueueStatus::overloaded);
    });
    send(request.producer, proto::EnqueueReply{request.frame.request_id, std::move(request.outcomes),
                                               overloaded ? static_cast<uint32_t>(config_.overload_retry_after_ms) : 0u});
  }

  std::map<std::string, proto::Confirm> confirms;  // by routing id
  std::map<std::string, Peer> confirm_peers;
  for (const auto& call : sent.result_calls) {
    if (script_failed(call.reply, call.ack ? "ack" : "nack")) continue;  // kept for the next round
    if (!call.ack) {
      auto outcomes = Store::parse_nack(rs[call.reply].get());
      if (outcomes)
        for (const auto& o : *outcomes)
          if (o.status == 1) {
            if (o.due_ms > now) queue(call.queue).next_due_ms = min_known(queue(call.queue).next_due_ms, o.due_ms);
            else queue(call.queue).maybe_ready = true;
          }
    }
    for (size_t i : call.results) {
      auto& pending = sent.results[i];
      confirm_peers[pending.worker.routing_id] = pending.worker;
      confirms[pending.worker.routing_id].items.push_back({pending.result.queue, pending.result.id, pending.result.token});
      pending.result.token = 0;  // applied: dropped below
    }
  }
  for (auto& pending : sent.results)
    if (pending.result.token != 0) results_.push_back(std::move(pending));
  for (auto& [rid, confirm] : confirms) send(confirm_peers[rid], confirm);

  for (const auto& [reply, name] : sent.requeue_calls)
    if (!script_failed(reply, "requeue")) queue(name).maybe_ready = true;

  for (const auto& call : sent.extend_calls) {
    auto applied = Store::parse_integers(rs[call.reply].get());
    if (!applied || applied->size() != call.items.size()) continue;
    for (size_t j = 0; j < call.items.size(); ++j) {
      if ((*applied)[j] == 1) {
        if (InflightJob* job = inflight_.find(call.queue, call.items[j].id); job && job->token == call.items[j].token)
          job->lease_deadline_ms = sent.extended_deadline;
      } else {
        // That delivery is no longer current (re-leased or finished): the
        // worker's eventual result will be rejected as stale.
        inflight_.remove(call.queue, call.items[j].id, call.items[j].token);
      }
    }
  }

  for (auto& calls : sent.queue_calls) {
    Queue& q = queue(calls.queue);
    if (calls.promote) {
      if (auto p = Store::parse_promote(rs[*calls.promote].get())) {
        if (p->moved > 0) q.maybe_ready = true;
        // More due jobs than one batch: promote again at once.
        q.next_due_ms = p->moved == config_.promote_batch ? now : p->next_due_ms;
      } else {
        spdlog::error("promote on '{}': {}", calls.queue, p.error().message);
      }
    }
    if (calls.reclaim) {
      if (auto r = Store::parse_reclaim(rs[*calls.reclaim].get())) {
        if (r->requeued + r->dead > 0)
          spdlog::info("queue '{}': {} expired leases re-queued, {} dead-lettered", calls.queue, r->requeued, r->dead);
        if (r->requeued > 0) q.maybe_ready = true;
        q.next_deadline_ms = r->requeued + r->dead == config_.reclaim_batch ? now : r->next_deadline_ms;
      } else {
        spdlog::error("reclaim on '{}': {}", calls.queue, r.error().message);
      }
    }
    if (calls.sweep) {
      auto removed = Store::parse_integers(rs[*calls.sweep].get());
      const bool valid = removed && removed->size() == 2;
      if (!valid) spdlog::error("sweep on '{}': bad reply", calls.queue);
      // A full sweep means more is past retention: sweep again next turn.
      const bool more = valid && std::max((*removed)[0], (*removed)[1]) == kSweepLimit;
      q.next_sweep_ms = more ? now : now + kSweepIntervalMs;
    }
    if (calls.lease) {
      auto jobs = Store::parse_lease(rs[*calls.lease].get());
      if (!jobs) {
        spdlog::error("lease on '{}': {}", calls.queue, jobs.error().message);
        continue;
      }
      q.maybe_ready = static_cast<int>(jobs->size()) == calls.lease_count;
      if (jobs->empty()) continue;
      q.next_deadline_ms = min_known(q.next_deadline_ms, sent.lease_deadline);
      // The next round is already in Redis (or there is none): sending now
      // overlaps Redis's work.
      dispatch(q, std::move(*jobs), sent.lease_deadline);
    }
  }

  if (!sent.stats_requests.empty()) {
    proto::StatsReply reply;
    reply.workers = static_cast<uint32_t>(workers_.size());
    for (size_t i = 0; i < sent.stats_replies.size(); ++i)
      if (auto s = Store::parse_stats(sent.stats_queues[i], rs[sent.stats_replies[i]].get())) reply.queues.push_back(*s);
    for (const auto& [peer, request_id] : sent.stats_requests) {
      reply.request_id = request_id;
      send(peer, reply);
    }
  }
}

void Broker::dispatch(Queue& q, std::vector<LeasedJob>&& jobs, int64_t deadline) {
  // Spread the batch over the workers with free slots, one job each in turn;
  // each worker gets its share in TASKS frames, not one message per job.
  auto slots = workers_.free_slots(q.name, [&](const std::string& w) { return inflight_.count_for_worker(w); });
  std::vector<proto::Tasks> frames(slots.size());
  std::vector<size_t> frame_bytes(slots.size(), 0);
  auto flush = [&](size_t slot) {
    if (frames[slot].items.empty()) return;
    // If the worker vanished meanwhile ROUTER drops the frame; the leases then
    // run out at the delivery deadline and the jobs are leased again.
    send(Peer{slots[slot].first, false}, frames[slot]);
    frames[slot].items.clear();
    frame_bytes[slot] = 0;
  };
  size_t next = slots.empty() ? 0 : q.rotation++ % slots.size();
  for (auto& job : jobs) {
    size_t tried = 0;
    while (tried < slots.size() && slots[next].second == 0) {
      next = (next + 1) % slots.size();
      ++tried;
    }
    if (tried == slots.size()) {
      // Two queues leased against the same free slots this round: give the
      // surplus back at once, without charging an attempt.
      requeues_[q.name].push_back(NackItem{job.id, job.token, NackMode::handed_back, "no free worker", 0});
      continue;
    }
    const size_t slot = next;
    --slots[slot].second;
    next = (next + 1) % slots.size();
    inflight_.add(InflightJob{q.name, job.id, job.token, slots[slot].first, deadline});
    auto& r = job.record;
    frame_bytes[slot] += r.payload.size() + job.id.size() + r.type.size();
    frames[slot].items.push_back(proto::Task{q.name, std::move(job.id), std::move(r.type), proto::Bytes{std::move(r.payload)},
                                             r.due_ms, job.attempt, r.max_attempts, job.token, r.created_ms});
    if (frames[slot].items.size() == proto::kMaxBatch || frame_bytes[slot] >= proto::kMaxTasksFrameBytes) flush(slot);
  }
  for (size_t slot = 0; slot < frames.size(); ++slot) flush(slot);
}

}  // namespace dueq::broker

namespace dueq::broker {

std::vector<std::string> Broker::queues_for(const std::string& queue) const {
  if (!queue.empty()) return {queue};
  std::vector<std::string> out;
  for (const auto& [name, q] : queues_) out.push_back(name);
  return out;
}

Result<std::string> Broker::find_job_queue(const std::string& id, const std::string& queue) {
  for (const auto& name : queues_for(queue)) {
    auto fields = store_.job_fields(name, id);
    if (!fields) return std::unexpected(fields.error());
    if (!fields->empty()) return name;
  }
  return fail(Errc::not_found, "no job " + id);
}

void Broker::on_admin(const Peer& peer, const proto::AdminRequest& request, int64_t now) {
  if (!store_.connected()) {
    send(peer, proto::ErrorFrame{request.request_id, "unavailable", "Redis is unavailable", 1000});
    return;
  }
  auto reply = run_admin(request, now);
  if (!reply) {
    const bool unavailable = reply.error().code == Errc::unavailable;
    if (unavailable) store_.disconnect();
    send(peer, proto::ErrorFrame{request.request_id, errc_name(reply.error().code), reply.error().message,
                                 unavailable ? 1000u : 0u});
    return;
  }
  reply->request_id = request.request_id;
  send(peer, *reply);
}

// Operator commands run inside the event loop: they are rare, and each Redis
// call they make is bounded (at most 1,000 jobs).
Result<proto::AdminReply> Broker::run_admin(const proto::AdminRequest& request, int64_t now) {
  proto::AdminReply reply;
  auto run_one = [&](Round& round) -> Result<std::vector<ReplyPtr>> {
    auto replies = store_.execute(round);
    if (!replies) return replies;
    if (auto err = reply_error((*replies)[0].get()); !err.empty()) return fail(Errc::internal, std::string(err));
    return replies;
  };
  const std::string& op = request.op;

  if (op == "cancel") {
    for (const auto& id : request.ids) {
      std::map<std::string, std::string> row{{"id", id}};
      auto queue_name = find_job_queue(id, request.queue);
      if (!queue_name) {
        if (queue_name.error().code != Errc::not_found) return std::unexpected(queue_name.error());
        row["result"] = "not found";
        reply.rows.push_back(std::move(row));
        continue;
      }
      row["queue"] = *queue_name;
      Round round;
      round.cancel(*queue_name, now, id, config_.policy(*queue_name).done_retention_s);
      auto replies = run_one(round);
      if (!replies) return std::unexpected(replies.error());
      auto outcome = Store::parse_cancel((*replies)[0].get());
      if (!outcome) return std::unexpected(outcome.error());
      switch (outcome->status) {
        case 1: row["result"] = "cancelled"; break;
        case 2: {
          row["result"] = "cancelling: it is running; its worker was told to stop";
          const InflightJob* job = inflight_.find(*queue_name, id);
          if (job != nullptr && job->token == outcome->token && !job->worker.empty())
            send(Peer{job->worker, false}, proto::Cancel{{*queue_name, id, outcome->token}});
          break;
        }
        case -1: row["result"] = "already finished"; break;
        default: row["result"] = "not found";
      }
      reply.rows.push_back(std::move(row));
    }
    return reply;
  }

  if (op == "dead_list") {
    const int64_t limit = request.limit == 0 ? 1000 : std::min<int64_t>(request.limit, 10'000);
    for (const auto& name : queues_for(request.queue)) {
      auto rows = store_.dead_jobs(name, limit);
      if (!rows) return std::unexpected(rows.error());
      for (auto& row : *rows) reply.rows.push_back(std::move(row));
    }
    return reply;
  }

  if (op == "replay" || op == "purge") {
    const bool replay = op == "replay";
    size_t changed = 0;
    auto apply = [&](Round& round, const std::string& name) -> Result<size_t> {
      auto replies = run_one(round);
      if (!replies) return std::unexpected(replies.error());
      auto ids = Store::parse_strings((*replies)[0].get());
      if (!ids) return std::unexpected(ids.error());
      for (const auto& id : *ids) reply.rows.push_back({{"id", id}, {"queue", name}});
      changed += ids->size();
      if (replay && !ids->empty()) queue(name).maybe_ready = true;
      return ids->size();
    };
    if (request.ids.empty()) {
      if (replay && request.queue.empty()) return fail(Errc::bad_argument, "replaying every dead job needs a queue");
      if (!replay && request.older_than_ms <= 0) return fail(Errc::bad_argument, "purge needs ids or an age");
      for (const auto& name : queues_for(request.queue)) {
        while (true) {
          Round round;
          if (replay) round.replay_oldest(name, now, 1000);
          else round.purge_dead_before(name, now - request.older_than_ms, 1000);
          auto n = apply(round, name);
          if (!n) return std::unexpected(n.error());
          if (*n < 1000) break;
        }
      }
    } else {
      std::map<std::string, std::vector<std::string>> by_queue;
      for (const auto& id : request.ids) {
        auto name = find_job_queue(id, request.queue);
        if (name) by_queue[*name].push_back(id);
        else if (name.error().code != Errc::not_found) return std::unexpected(name.error());
      }
      for (const auto& [name, ids] : by_queue) {
        Round round;
        if (replay) round.replay(name, now, ids);
        else round.purge(name, ids);
        if (auto n = apply(round, name); !n) return std::unexpected(n.error());
      }
    }
    reply.summary = fmt::format("{} {}", changed, replay ? "replayed" : "purged");
    return reply;
  }

  // audit
  size_t violations = 0;
  for (const auto& name : queues_for(request.queue)) {
    auto report = audit_queue(store_, name, /*repair=*/false);
    if (!report) return std::unexpected(report.error());
    const auto& c = report->counts;
    reply.rows.push_back({{"queue", name}, {"accepted", std::to_string(c.accepted)}, {"done", std::to_string(c.done)},
                          {"cancelled", std::to_string(c.cancelled)}, {"purged", std::to_string(c.purged)},
                          {"dead", std::to_string(c.dead)}, {"scheduled", std::to_string(c.scheduled)},
                          {"ready", std::to_string(c.ready)}, {"leased", std::to_string(c.leased)},
                          {"imbalance", std::to_string(c.imbalance())}});
    if (c.imbalance() != 0) ++violations;
    for (const auto& [id, what] : report->problems) {
      reply.rows.push_back({{"queue", name}, {"id", id}, {"problem", what}});
      ++violations;
    }
  }
  reply.summary = violations == 0 ? "clean" : fmt::format("{} violations", violations);
  return reply;
}

}  // namespace dueq::broker
