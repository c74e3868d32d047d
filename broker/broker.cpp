#include "broker/broker.hpp"

#include <csignal>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <thread>

#include "broker/admin/job_lookup.hpp"
#include "common/ids.hpp"
#include "common/names.hpp"
#include "common/protocol.hpp"
#include "common/unique_fd.hpp"

namespace dueq::broker {

namespace {
constexpr int64_t kMaxSleepMs = 5'000;  // upper bound on one wait; nothing relies on it
constexpr int64_t kMaxReconnectViaSentinelMs = 400;

// Every queue in the store's registry counted registered, as a take-over
// does: a store that came back (a fail-over to a replica that had not
// seen the last writes, a Redis restarted from an older file) may hold a
// queue this broker forgot, its delete applied only where it was lost,
// and the scheduler skips a queue it does not count registered. Unread
// (the link broke again), the next reconnect reads it.
void register_stored_queues(QueueTable& queues, RedisClient& redis) {
  auto stored = known_queues(redis);
  if (!stored) {
    spdlog::warn("the registry of queues could not be read after the reconnect: {}", stored.error().message);
    return;
  }
  for (const auto& name : *stored)
    if (validate_queue_name(name)) queues.get(name).registered = true;
}
}  // namespace

Broker::Broker(BrokerConfig config, Metrics& metrics, AdminGateway& admin_gateway, const Clock& clock)
    : config_(std::move(config)),
      metrics_(metrics),
      admin_gateway_(admin_gateway),
      clock_(clock),
      lease_clock_(clock),
      address_(parse_redis_url(config_.redis_url).value_or(RedisAddress{})),
      redis_(address_),
      context_(1),
      router_(context_, zmq::socket_type::router),
      connection_monitor_(context_, router_),
      gate_(clock_),
      access_(context_),
      broker_id_(new_instance_id()),
      leadership_(config_, clock_, broker_id_),
      outbox_(router_),
      refusals_(clock_),
      waits_(clock_, outbox_),
      results_(config_, clock_, queues_, inflight_, outbox_, refusals_, waits_),
      extensions_(config_, lease_clock_, inflight_, refusals_),
      workers_(config_, lease_clock_, broker_id_, queues_, inflight_, results_, extensions_, outbox_),
      enqueuer_(config_, clock_, queues_, outbox_),
      group_enqueuer_(config_, clock_, queues_, outbox_, enqueuer_),
      stats_(config_, clock_, queues_, outbox_, workers_.registry()),
      cron_(config_, clock_, lease_clock_, queues_, enqueuer_),
      scheduler_(config_, clock_, lease_clock_, queues_, inflight_, workers_, refusals_),
      dispatcher_(config_, lease_clock_, queues_, workers_.registry(), inflight_, results_, outbox_, refusals_, metrics_),
      admin_(config_, clock_, address_, background_budget_),
      queue_remover_(queues_, workers_.registry(), [this](const std::string& queue) { return cron_.entry_for(queue); }, outbox_),
      inbound_(router_, clock_, outbox_, access_, workers_, enqueuer_, group_enqueuer_, stats_, admin_, queue_remover_, waits_),
      sentinel_watch_(address_) {
  // Run times are kept only where /metrics can show them: a lookup per result saved otherwise.
  if (!config_.http.empty()) workers_.measure_into(metrics_);
  redis_.count_commands_in(background_budget_);
  redis_.set_name("dueq-loop");
}

Broker::~Broker() {
  if (reconciler_) reconciler_->stop();
  admin_gateway_.detach();
  admin_.stop();
  router_.close();
}

void Broker::update_metrics() {
  metrics_.set_health(true, leadership_.epoch(), redis_.connected());
  if (config_.http.empty()) return;
  const int64_t now = clock_.steady_ms();
  if (!metrics_.refresh_due(now)) return;
  metrics_.refresh_started(now);
  if (redis_.connected()) stats_.for_metrics(metrics_);
  uint64_t capacity = 0;
  std::vector<WorkerRow> rows;
  std::map<std::string, uint64_t> per_queue;
  const int64_t steady_now = clock_.steady_ms();  // workers are heard on the steady clock
  std::map<std::string, std::vector<const InflightJob*>> held;
  inflight_.for_each([&](const InflightJob& job) { held[job.worker].push_back(&job); });
  const int64_t lease_now = lease_clock_.now_ms();
  for (const auto& [routing_id, w] : workers_.registry().all()) {
    capacity += w.capacity;
    for (const auto& q : w.queues) ++per_queue[q];
    if (rows.size() >= Metrics::kMaxWorkerRows) continue;
    rows.push_back(WorkerRow{w.worker_id, w.key_name, w.queues, w.capacity, inflight_.count_for_worker(routing_id),
                             w.draining, std::max<int64_t>(0, steady_now - w.last_seen_ms), {}});
    auto& mine = held[routing_id];
    const size_t n = std::min(mine.size(), WorkerRow::kMaxJobsPerWorker);
    std::partial_sort(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(n), mine.end(),
                      [](const auto* a, const auto* b) { return a->delivered_ms < b->delivered_ms; });
    for (size_t i = 0; i < n; ++i)
      rows.back().jobs.push_back({mine[i]->queue, mine[i]->id, mine[i]->started, lease_now - mine[i]->delivered_ms,
                                  mine[i]->progress_percent, mine[i]->progress_text});
  }
  metrics_.set_workers(workers_.registry().size(), capacity, inflight_.size(), std::move(rows));
  metrics_.set_queue_workers(per_queue);
  std::vector<CronRow> cron_rows;
  for (auto& u : cron_.upcoming(clock_.wall_ms()))
    cron_rows.push_back({std::move(u.name), std::move(u.queue), std::move(u.expression), std::move(u.time_zone), u.next_tick_ms});
  metrics_.set_cron(std::move(cron_rows));
  metrics_.publish(clock_.wall_ms());
}

// A relative timer on the monotonic clock, to the microsecond: zmq_poll
// counts whole milliseconds, and a due time wakes the loop at its own
// millisecond instead of up to one after it. Returns zmq_poll's timeout.
long Broker::arm_timer(int timer_fd) {
  const int64_t wait_us = stopping_ ? 0 : us_until_wake();
  stall_watch_.waiting(clock_.steady_ms(), thread_cpu_ms(), wait_us / 1000);
  if (wait_us <= 0) return 0;
  itimerspec in{};
  in.it_value.tv_sec = wait_us / 1'000'000;
  in.it_value.tv_nsec = (wait_us % 1'000'000) * 1000;
  ::timerfd_settime(timer_fd, 0, &in, nullptr);
  return -1;
}

void Broker::check_own_stall() {
  if (const int64_t deaf_ms = stall_watch_.woke(clock_.steady_ms(), thread_cpu_ms()); deaf_ms > 0) on_own_stall(deaf_ms);
}

void Broker::on_own_stall(int64_t deaf_ms) {
  // Long enough for a worker that gave this broker up to try another, come
  // back and heartbeat: worker_timeout and two heartbeats from now (not
  // scaled by delivery_timeout, which a deployment may make a minute long).
  workers_.registry().count_as_heard(clock_.steady_ms() + 2 * config_.heartbeat_ms);
  // Its deliveries' leases get a take-over's grace.
  const size_t held = inflight_.hold_until(scheduler_.grace_deadline(), [&](const InflightJob& job) {
    extensions_.extend(job.queue, TokenRef{job.id, job.token}, LeaseReport::held);
  });
  // Past the point where workers give it up (three heartbeats) it is worth
  // a warning; shorter ones, under a slow store, are routine.
  spdlog::log(deaf_ms >= 3 * config_.heartbeat_ms ? spdlog::level::warn : spdlog::level::debug,
              "the broker did not run for {} ms (stopped or starved): its workers' silence then is not held "
              "against them, and {} deliveries' leases are held {} ms for their workers to report them",
              deaf_ms, held, config_.worker_timeout_ms + config_.delivery_timeout_ms);
}

void Broker::on_signal(int signal_fd) {
  signalfd_siginfo info{};
  if (::read(signal_fd, &info, sizeof info) != sizeof info) return;
  if (info.ssi_signo == SIGHUP) {
    access_.reload();
    return;
  }
  spdlog::info("signal {}: stopping; applying {} results held", info.ssi_signo, results_.unapplied());
  stopping_ = true;
}

void Broker::on_master_announced() {
  const std::string announced = sentinel_watch_.take_announcement();
  if (announced.empty() || !redis_.connected()) return;
  spdlog::warn("the sentinels announced a new master for '{}' ({}): leaving the old one", address_.master_name,
               announced);
  fail_rounds(Error{Errc::unavailable, "the sentinels switched the master"});
}

// Whether a stopping broker is done: every result applied, or none can be.
bool Broker::stopped_applying() const {
  if (!stopping_ || !rounds_.empty()) return false;
  if (results_.unapplied() == 0) return true;
  if (redis_.connected() && !refusals_.refusing()) return false;
  spdlog::error("stopping with {} results not applied: Redis {} (workers resend them)", results_.unapplied(),
                redis_.connected() ? "refuses them" : "unavailable");
  return true;
}

Result<RunEnd> Broker::run(int signal_fd) {
  UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (timer.get() < 0) return fail(Errc::internal, "timerfd_create failed");
  enum Source { kRouter, kSignal, kTimer, kAdmin, kMonitor, kZap, kSentinel };
  std::vector<zmq::pollitem_t> items = {
      {router_.handle(), 0, ZMQ_POLLIN, 0},         {nullptr, signal_fd, ZMQ_POLLIN, 0},
      {nullptr, timer.get(), ZMQ_POLLIN, 0},        {nullptr, admin_.ready_fd(), ZMQ_POLLIN, 0},
      {connection_monitor_.handle(), 0, ZMQ_POLLIN, 0}, {access_.zap_handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, sentinel_watch_.ready_fd(), ZMQ_POLLIN, 0},
  };
  auto ready = [&](Source s) { return (items[s].revents & ZMQ_POLLIN) != 0; };
  while (true) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(arm_timer(timer.get())));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return fail(Errc::internal, std::string("poll failed: ") + e.what());
    }
    if (!stopping_) check_own_stall();
    if (ready(kTimer)) {
      uint64_t expirations = 0;
      [[maybe_unused]] auto n = ::read(timer.get(), &expirations, sizeof expirations);
    }
    if (ready(kSignal)) on_signal(signal_fd);
    if (ready(kSentinel)) on_master_announced();
    if (ready(kAdmin)) admin_.deliver(outbox_, inflight_, queues_, cron_, waits_);
    if (ready(kMonitor)) gate_.at_fd_limit(connection_monitor_.drain(clock_.steady_ms()));
    gate_.tick();
    if (ready(kZap)) access_.answer_zap(clock_.steady_ms(), gate_);
    if (!stopping_) {
      inbound_.receive(config_.max_frames_per_turn, connection_monitor_.connections());
      // Judged only up to the moment before which every queued frame was
      // read: a heartbeat still waiting behind a long batch of frames counts.
      workers_.expire_silent(inbound_.all_read_before_ms());
    }
    if (!stopping_ && deposed()) {
      // Whatever it holds, the workers resend to the new leader.
      spdlog::warn("broker {} no longer leads: standing by (its {} results not applied are resent by the workers)",
                   broker_id_, results_.unapplied());
      admin_gateway_.detach();
      admin_.stop();
      return RunEnd::deposed;
    }
    serve_redis_turn();
    if (stopped_applying()) break;
  }
  admin_gateway_.detach();
  admin_.stop();
  leadership_.resign(redis_);
  spdlog::info("broker stopped");
  return RunEnd::stopped;
}

void Broker::serve_redis_turn() {
  if (!redis_.connected()) reconnect();
  update_metrics();
  if (redis_.connected()) {
    pump_rounds();
    return;
  }
  enqueuer_.answer_unavailable("Redis is unavailable", reconnect_backoff_ms_);
  group_enqueuer_.answer_unavailable("Redis is unavailable", reconnect_backoff_ms_);
  stats_.answer_unavailable("Redis is unavailable", reconnect_backoff_ms_);
  extensions_.drop();
}

int64_t Broker::us_until_wake() const {
  const int64_t steady_now = clock_.steady_ms();
  if (!redis_.connected()) return std::max<int64_t>(0, (reconnect_at_ms_ - steady_now) * 1000);
  if (!rounds_.empty() || enqueuer_.has_work() || group_enqueuer_.has_work() || results_.has_work() || extensions_.has_work() ||
      queue_remover_.has_work() || dispatcher_.can_lease_now() || waits_.has_work())
    return 0;
  int64_t wait = kMaxSleepMs * 1000;
  if (const int64_t next = scheduler_.us_until_next(clock_.wall_us()); next >= 0) wait = std::min(wait, next);
  if (const int64_t retry = refusals_.us_until_retry(); retry >= 0) wait = std::min(wait, retry);
  if (const int64_t lifts = dispatcher_.us_until_limit_lifts(); lifts >= 0) wait = std::min(wait, lifts);
  if (const int64_t cron = cron_.us_until_next(clock_.wall_ms()); cron >= 0) wait = std::min(wait, cron);
  if (const int64_t retry = gate_.us_until_retry(); retry >= 0) wait = std::min(wait, retry);
  if (const int64_t stats = stats_.us_until_next_read(); stats >= 0) wait = std::min(wait, stats);
  if (const int64_t waits = waits_.us_until_next(); waits >= 0) wait = std::min(wait, waits);
  if (!config_.http.empty()) wait = std::min(wait, metrics_.ms_until_refresh(steady_now) * 1000);
  if (const int64_t renewal = leadership_.us_until_renewal(); renewal >= 0) wait = std::min(wait, renewal);
  if (const int64_t expiry = workers_.next_expiry_ms(); expiry >= 0)
    wait = std::min(wait, std::max<int64_t>(0, (expiry - steady_now) * 1000));
  return wait;
}

void Broker::pump_rounds() {
  if (rounds_.empty()) send_turn();
  if (rounds_.empty()) return;
  // A few enqueued jobs that arrive while Redis works go out at once when a
  // turn is free, not after the reply: waiting for it cost a producer most
  // of a round trip. Batches wait for the next turn as before: their
  // producers are after throughput, and turns sent early split Redis's work
  // into more, smaller calls.
  while (!redis_.replies_buffered() && receive_while_redis_works()) {
    send_turn();
    if (rounds_.empty()) return;  // sending failed: every outstanding round failed with it
  }
  send_turn();
  if (rounds_.empty()) return;  // sending failed: every outstanding round failed with it
  auto replies = redis_.receive();
  if (!replies) {
    fail_rounds(replies.error());
    return;
  }
  SentRound oldest = std::move(rounds_.front());
  rounds_.pop_front();
  if (oldest.ends_turn) --turns_in_flight_;
  oldest.round.apply(*replies);
  metrics_.round_applied(clock_.steady_us() - oldest.sent_us);
}

void Broker::send_turn() {
  if (turns_in_flight_ >= 2 || deposed()) return;
  // Enqueues go first and alone: Redis runs them first and their replies
  // arrive first, so producers are answered without waiting for the leases,
  // acks and promotions behind them (the round that may lease the new jobs
  // still follows at once, in the same write to Redis's queue).
  if (leadership_.unconfirmed()) {
    // Stopped, stalled or cut off for a whole lease: nothing is written
    // before Redis says this broker still leads.
    Round renewal;
    leadership_.add_to(renewal);
    if (renewal.empty()) return;
    rounds_.push_back(SentRound{std::move(renewal), true, clock_.steady_us()});
    ++turns_in_flight_;
    if (auto ok = redis_.send(rounds_.back().round); !ok) fail_rounds(ok.error());
    return;
  }
  Round enqueues;
  enqueuer_.add_to(enqueues, dispatcher_, stopping_);
  // Flows and batches in a round of their own, after the enqueues: a call
  // of 1,000 jobs takes Redis milliseconds no plain producer waits for.
  Round groups;
  group_enqueuer_.add_to(groups);
  Round rest;
  leadership_.add_to(rest);
  results_.add_to(rest);
  extensions_.add_to(rest);
  if (!stopping_) cron_.add_to(rest);
  scheduler_.add_to(rest);
  dispatcher_.add_to(rest, stopping_);
  stats_.add_to(rest);
  waits_.add_to(rest);
  queue_remover_.add_to(rest);
  if (rest.empty()) rest.apply({});  // only steps without a call (a stats answer with no queue yet)
  std::vector<Round> turn;
  if (!enqueues.empty()) turn.push_back(std::move(enqueues));
  if (!groups.empty()) turn.push_back(std::move(groups));
  if (!rest.empty()) turn.push_back(std::move(rest));
  for (size_t i = 0; i < turn.size(); ++i) {
    rounds_.push_back(SentRound{std::move(turn[i]), i + 1 == turn.size(), clock_.steady_us()});
    if (rounds_.back().ends_turn) ++turns_in_flight_;
    if (auto ok = redis_.send(rounds_.back().round); !ok) {
      fail_rounds(ok.error());
      for (size_t j = i + 1; j < turn.size(); ++j) turn[j].fail();
      return;
    }
  }
}

bool Broker::receive_while_redis_works() {
  if (stopping_) return false;
  std::array<zmq::pollitem_t, 2> items = {{{router_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, redis_.socket_fd(), ZMQ_POLLIN, 0}}};
  // Past the limit the blocking read takes over (and times out if Redis hangs).
  const int64_t give_up = clock_.steady_ms() + 1'000;
  for (int64_t now = clock_.steady_ms(); now < give_up; now = clock_.steady_ms()) {
    // In slices of at most 100 ms, so that a stop of the broker meanwhile
    // shows as oversleeping (StallWatch) by nearly all of its length.
    const int64_t slice = std::min<int64_t>(give_up - now, 100);
    stall_watch_.waiting(now, thread_cpu_ms(), slice);
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(slice));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) break;
      continue;
    }
    check_own_stall();
    if (items[1].revents & ZMQ_POLLIN) break;
    if (items[0].revents & ZMQ_POLLIN) {
      inbound_.receive(config_.max_frames_per_turn, connection_monitor_.connections());
      if (turns_in_flight_ < 2 && enqueuer_.has_few_jobs_gathered(kEarlyTurnMaxJobs)) return true;
    }
  }
  return false;
}

// Results are kept and retried, producers are told to retry (same ids are
// safe: a stored job is answered "duplicate"), leases asked for are given
// back to credit.
void Broker::fail_rounds(const Error& error) {
  spdlog::error("Redis round failed: {}; results are kept and retried", error.message);
  if (error.code == Errc::not_master) leadership_.step_down_if_lapsed(error.message);
  auto failed = std::exchange(rounds_, {});
  turns_in_flight_ = 0;
  redis_.disconnect();
  for (auto& sent : failed) sent.round.fail();
  reconnect_at_ms_ = clock_.steady_ms();  // try once at once, then back off
}

Result<void> Broker::set_lease_clock() {
  const int64_t before_us = clock_.steady_us();
  auto reply = redis_.call(Command{"TIME"});
  const int64_t after_us = clock_.steady_us();
  if (!reply) return std::unexpected(reply.error());
  auto server_us = reply::server_time_us(reply->get());
  if (!server_us) return std::unexpected(server_us.error());
  const int64_t was_ms = lease_clock_.now_ms();
  lease_clock_.set(*server_us / 1000, (before_us + after_us) / 2000);
  spdlog::info("lease deadlines run on the store's clock (Redis TIME): {} ms from this host's", lease_clock_.now_ms() - was_ms);
  return {};
}

void Broker::reconnect() {
  const int64_t now = clock_.steady_ms();
  if (now < reconnect_at_ms_) return;
  auto ok = redis_.connect();
  if (!ok) {
    spdlog::warn("Redis unavailable, retrying in {} ms: {}", reconnect_backoff_ms_, ok.error().message);
    if (ok.error().code == Errc::not_master) leadership_.step_down_if_lapsed(ok.error().message);
    reconnect_at_ms_ = now + reconnect_backoff_ms_;
    // Behind sentinels a lost master comes back as another address once the
    // fail-over is done: asking them is cheap, and the back-off adds to the gap.
    reconnect_backoff_ms_ =
        std::min(reconnect_backoff_ms_ * 2, address_.via_sentinel() ? kMaxReconnectViaSentinelMs : Broker::kMaxReconnectMs);
    return;
  }
  spdlog::info("Redis connection restored");
  reconnect_backoff_ms_ = 100;
  admin_.store_reconnected();
  // Whatever happened while away (a restart, a failover) the replies of the
  // next round bring the schedule and lease times up to date, of every
  // queue the store registers.
  register_stored_queues(queues_, redis_);
  queues_.forget_times();
}

}  // namespace dueq::broker
