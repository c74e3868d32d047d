#include "broker/admin/admin.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>

#include "broker/admin/command_table.hpp"
#include "broker/admin/bulk_actions.hpp"
#include "broker/admin/job_lookup.hpp"

namespace dueq::broker {

namespace {

// A running job's start, worker and progress are known only to the loop that sent it
// (Redis holds neither until it finishes, when its history entry does): a
// lookup or a listing gets them here, as that entry would hold them (the
// delivery's time on the store's clock, the worker's routing id).
void add_holder(std::map<std::string, std::string>& fields, const InflightTable& inflight) {
  const auto state = fields.find("s");
  if (state == fields.end() || state->second != "leased" || fields.contains("st")) return;
  const InflightJob* job = inflight.find(fields["queue"], fields["id"]);
  if (job == nullptr || job->worker.empty()) return;
  fields["st"] = std::to_string(job->delivered_ms);
  fields["w"] = job->worker;
  if (job->progress_percent < 0) return;
  fields["pg"] = std::to_string(job->progress_percent);
  fields["pt"] = job->progress_text;
  fields["pa"] = std::to_string(job->progress_ms);
}

void add_holders(Admin::AnswerFrame& frame, const InflightTable& inflight) {
  if (auto* job = std::get_if<proto::JobReply>(&frame); job != nullptr && job->found) add_holder(job->fields, inflight);
  if (auto* listed = std::get_if<proto::AdminReply>(&frame))
    for (auto& row : listed->rows) add_holder(row, inflight);
}

}  // namespace

Admin::Admin(const BrokerConfig& config, const Clock& clock, RedisAddress address, std::shared_ptr<RedisBudget> budget)
    : config_(config), clock_(clock), redis_(std::move(address)), ready_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  redis_.set_budget(std::move(budget));
  redis_.set_stop_flag(thread_.stop_flag());
  redis_.set_reads_from_master_only(true);
  redis_.set_name("dueq-admin");
}

void Admin::submit(const Peer& peer, proto::JobRequest&& request) {
  const uint64_t id = request.request_id;
  submit(peer, id, Request(std::move(request)));
}

void Admin::submit(const Peer& peer, proto::AdminRequest&& request) {
  const uint64_t id = request.request_id;
  submit(peer, id, Request(std::move(request)));
}

void Admin::submit(const Peer& peer, uint64_t request_id, Request&& request) {
  // A client resends a request it has no answer to yet: the one in progress
  // answers both.
  if (!in_progress_.emplace(peer.routing_id, request_id).second) return;
  size_t& waiting = waiting_by_requester_[requester(peer)];
  ++waiting;  // until deliver() sends its answer, whatever it is
  {
    std::lock_guard lock(thread_.mutex());
    if (waiting <= kMaxQueuedPerRequester && requests_.size() < kMaxQueued) {
      requests_.push_back(Queued{peer, std::move(request), {}});
      thread_.notify();
      return;
    }
    const std::string why = waiting > kMaxQueuedPerRequester
                                ? fmt::format("{} has {} admin requests waiting", peer.key_name.empty() ? "this connection" : "this key",
                                              kMaxQueuedPerRequester)
                                : fmt::format("{} admin requests are waiting", kMaxQueued);
    answers_.push_back(Answer{peer, request_id, proto::ErrorFrame{request_id, "overloaded", why + "; retry later", 1000}, {}, {}});
  }
  signal_ready();
}

bool Admin::submit_local(Request request, LocalDone done) {
  std::lock_guard lock(thread_.mutex());
  if (local_waiting_ >= kMaxLocal || requests_.size() >= kMaxQueued) return false;
  ++local_waiting_;
  requests_.push_back(Queued{Peer{"(dashboard)", false, "dashboard", 0}, std::move(request), std::move(done)});
  thread_.notify();
  return true;
}

void Admin::signal_ready() {
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(ready_fd_.get(), &one, sizeof one);
}

void Admin::deliver(Outbox& outbox, InflightTable& inflight, QueueTable& queues, CronScheduler& cron, Waits& waits) {
  uint64_t count = 0;
  [[maybe_unused]] auto n = ::read(ready_fd_.get(), &count, sizeof count);
  std::vector<Answer> answers;
  {
    std::lock_guard lock(thread_.mutex());
    answers.swap(answers_);
  }
  for (auto& answer : answers) {
    if (!answer.local && !answer.silent) {
      in_progress_.erase({answer.peer.routing_id, answer.request_id});
      if (auto it = waiting_by_requester_.find(requester(answer.peer)); it != waiting_by_requester_.end() && --it->second == 0)
        waiting_by_requester_.erase(it);
    }
    for (const auto& ref : answer.stop_running) {
      const InflightJob* job = inflight.find(ref.queue, ref.id);
      if (job != nullptr && job->token == ref.token && !job->worker.empty())
        outbox.send(Peer{job->worker, false}, proto::Cancel{{ref}});
    }
    for (const auto& name : answer.paused_queues) queues.get(name).paused = true;
    for (const auto& name : answer.resumed_queues) {
      QueueState& q = queues.get(name);
      q.paused = false;
      q.maybe_ready = true;  // what waited while it was paused
    }
    for (const auto& name : answer.ready_queues) {
      queues.get(name).maybe_ready = true;
      waits.changed(name);  // a cancel of a waiting job ended it
    }
    for (const auto& [name, due_ms] : answer.earliest_due) {
      QueueState& q = queues.get(name);
      q.next_due_ms = earliest_known(q.next_due_ms, due_ms);
    }
    for (auto& entry : answer.cron_put) cron.put(std::move(entry), 0);
    for (const auto& name : answer.cron_removed) cron.remove(name);
    if (answer.silent) continue;
    add_holders(answer.frame, inflight);
    if (answer.local) answer.local(std::move(answer.frame));
    else std::visit([&](const auto& frame) { outbox.send(answer.peer, frame); }, answer.frame);
  }
}

void Admin::run() {
  while (true) {
    Queued next;
    {
      std::unique_lock lock(thread_.mutex());
      // Requests first; between them, a page of a running bulk action when
      // its rate allows (and a look for new ones every second).
      // Redis is asked only while an action may run: once at start (one a
      // deposed leader left), then after each `bulk` until none runs.
      // The configured keys' settings go in first, tried again every second
      // while Redis cannot take them.
      int64_t idle_ms = bulk_may_run_ ? std::max<int64_t>(0, next_bulk_ms_ - clock_.steady_ms()) : INT32_MAX;
      if (!keys_applied_) idle_ms = std::min<int64_t>(idle_ms, keys_tried_ ? 1'000 : 0);
      if (!thread_.wait_for(lock, std::chrono::milliseconds(idle_ms), [&] { return !requests_.empty(); })) return;
      if (requests_.empty()) {
        lock.unlock();
        if (!keys_applied_) {
          keys_tried_ = true;
          keys_applied_ = apply_configured_keys();
        } else {
          bulk_step();
        }
        continue;
      }
      next = std::move(requests_.front());
      requests_.pop_front();
    }
    Answer answer = handle_guarded(next.peer, next.request);
    answer.local = std::move(next.local);
    {
      std::lock_guard lock(thread_.mutex());
      if (answer.local) --local_waiting_;
      answers_.push_back(std::move(answer));
    }
    signal_ready();
  }
}

// One page of the oldest running bulk action, paced to its rate; what the
// loop must learn (jobs back in ready) goes out as an answer to no one.
void Admin::bulk_step() {
  constexpr int64_t kLookEveryMs = 1'000;
  constexpr size_t kPage = 500;
  next_bulk_ms_ = clock_.steady_ms() + kLookEveryMs;
  if (auto ok = open_connection(); !ok) return;
  try {
    auto action = next_bulk_action(redis_);
    if (!action) {
      redis_.disconnect();
      return;
    }
    if (!*action) {
      // Nothing to carry on: the connection is let go, so that no request
      // later meets one to a master that died while it sat idle.
      bulk_may_run_ = false;
      redis_.disconnect();
      return;
    }
    const size_t page = (*action)->rate > 0 ? std::min<size_t>(kPage, static_cast<size_t>((*action)->rate)) : kPage;
    AdminEffects effects;
    if (auto ok = run_bulk_page(redis_, config_, **action, clock_.wall_ms(), page, effects); !ok) {
      if (auto held_back = failure_log_.admit("bulk", clock_.steady_ms()))
        spdlog::warn("bulk {}: {}; tried again ({} more not logged)", (*action)->id, ok.error().message, *held_back);
      redis_.disconnect();
      return;
    }
    // At its rate: `page` jobs, then the time they take at that rate.
    next_bulk_ms_ = clock_.steady_ms() + ((*action)->rate > 0 ? static_cast<int64_t>(page) * 1000 / (*action)->rate : 0);
    if (effects.ready_queues.empty() && effects.earliest_due.empty()) return;
    Answer answer;
    answer.silent = true;
    answer.ready_queues = std::move(effects.ready_queues);
    answer.earliest_due = std::move(effects.earliest_due);
    {
      std::lock_guard lock(thread_.mutex());
      answers_.push_back(std::move(answer));
    }
    signal_ready();
  } catch (const std::exception& e) {
    redis_.disconnect();
    spdlog::error("bulk step failed: {}", loggable(e.what(), 200));
  }
}

// `[queues.NAME.keys."KEY"]`: each setting written as `dueq key limit`,
// `rate` and `weight` would (the leader's, over what those set before);
// false while Redis cannot take them. A setting Redis refuses (a queue with
// 10,000 keys of its own already) is logged and left out.
bool Admin::apply_configured_keys() {
  if (auto ok = open_connection(); !ok) return false;
  size_t written = 0;
  for (const auto& [queue, policy] : config_.queues)
    for (const auto& [key, settings] : policy.keys)
      for (const auto& [op, arg, value] : {std::tuple{"key_limit", "limit", &settings.limit},
                                           std::tuple{"key_rate", "rate", &settings.rate},
                                           std::tuple{"key_weight", "weight", &settings.weight}}) {
        if (value->empty()) continue;
        proto::AdminRequest request;
        request.op = op;
        request.queue = queue;
        request.args = {{"key", key}, {arg, *value}};
        AdminEffects effects;
        AdminContext context{redis_, config_, clock_.wall_ms(), effects, "config"};
        Result<proto::AdminReply> reply = fail(Errc::internal, "not run");
        try {
          reply = find_admin_command(op)->run(context, request);
        } catch (const std::exception& e) {
          reply = fail(Errc::internal, e.what());
        }
        if (!reply && reply.error().code == Errc::unavailable) return false;
        if (!reply) spdlog::warn("queues.{}.keys: {}", queue, loggable(reply.error().message, 200));
        else ++written;
      }
  if (written > 0) spdlog::info("wrote {} key settings from the configuration", written);
  return true;
}

// Opened anew when the loop's connection was since (store_reconnected) or
// when it broke; kept otherwise.
Result<void> Admin::open_connection() {
  const uint64_t loop_connects = loop_connects_.load(std::memory_order_relaxed);
  if (loop_connects != connects_seen_) redis_.disconnect();
  if (redis_.connected()) return {};
  connects_seen_ = loop_connects;
  return redis_.connect();
}

// Nothing a client sends may end the admin thread (and with it the broker):
// an exception from any command becomes an `internal` answer, and the
// connection, in an unknown state, is opened anew for the next request.
Admin::Answer Admin::handle_guarded(const Peer& peer, const Request& request) {
  try {
    return handle(peer, request);
  } catch (const std::exception& e) {
    redis_.disconnect();
    const uint64_t request_id = std::visit([](const auto& r) { return r.request_id; }, request);
    if (auto held_back = failure_log_.admit("", clock_.steady_ms()))
      spdlog::error("admin request failed: {} ({} more such failures not logged)", loggable(e.what(), 200), *held_back);
    Answer answer;
    answer.peer = peer;
    answer.request_id = request_id;
    answer.frame = proto::ErrorFrame{request_id, "internal", std::string("the broker failed on this request: ") + e.what(), 0};
    return answer;
  }
}

Admin::Answer Admin::handle(const Peer& peer, const Request& request) {
  Answer answer;
  answer.peer = peer;
  answer.request_id = std::visit([](const auto& r) { return r.request_id; }, request);
  auto unavailable = [&](const Error& error) {
    const bool down = error.code == Errc::unavailable || error.code == Errc::not_master;
    if (down) redis_.disconnect();
    answer.frame = proto::ErrorFrame{answer.request_id, errc_name(error.code), error.message, down ? 1000u : 0u};
  };
  // The connection kept since the last request may lead to a server that
  // restarted or was demoted meanwhile (a demoted master still answers
  // reads, without the newest writes): a PING, which carries the ROLE
  // check of every admin call, finds out before the request runs, and the
  // request runs whole on a new connection to the master instead.
  if (redis_.connected() && !redis_.call(Command{"PING"})) redis_.disconnect();
  if (auto ok = open_connection(); !ok) {
    unavailable(Error{Errc::unavailable, "Redis is unavailable: " + ok.error().message});
    return answer;
  }
  if (const auto* job = std::get_if<proto::JobRequest>(&request)) {
    auto reply = lookup_job(redis_, *job);
    if (reply) answer.frame = std::move(*reply);
    else unavailable(reply.error());
  } else {
    const auto& admin = std::get<proto::AdminRequest>(request);
    const AdminCommand* command = find_admin_command(admin.op);
    AdminEffects effects;
    AdminContext context{redis_, config_, clock_.wall_ms(), effects, peer.key_name.empty() ? "-" : peer.key_name};
    Result<proto::AdminReply> reply = command != nullptr
                                          ? command->run(context, admin)
                                          : Result<proto::AdminReply>(fail(Errc::bad_argument, "unknown admin operation " + admin.op));
    if (reply && command->writes) {
      if (auto kept = await_replicas(redis_, config_); !kept) reply = std::unexpected(kept.error());
    }
    answer.stop_running = std::move(effects.stop_running);
    answer.ready_queues = std::move(effects.ready_queues);
    answer.earliest_due = std::move(effects.earliest_due);
    answer.paused_queues = std::move(effects.paused_queues);
    answer.resumed_queues = std::move(effects.resumed_queues);
    answer.cron_put = std::move(effects.cron_put);
    answer.cron_removed = std::move(effects.cron_removed);
    if (admin.op == "bulk") bulk_may_run_ = true;
    if (reply) {
      reply->request_id = admin.request_id;
      answer.frame = std::move(*reply);
    } else {
      unavailable(reply.error());
    }
  }
  return answer;
}

}  // namespace dueq::broker
