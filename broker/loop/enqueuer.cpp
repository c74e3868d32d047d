#include "broker/loop/enqueuer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

#include "broker/store/encoding_pin.hpp"
#include "broker/store/job_record.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"

namespace dueq::broker {

namespace {
constexpr size_t kEnqueueChunk = 1000;  // enqueue.lua takes at most 1000 jobs
}  // namespace

namespace calls {

JobRecord new_job_record(const proto::NewJob& job, int64_t now_ms, uint32_t default_max_attempts) {
  return JobRecord{job.type,
                   job.payload.data,
                   job.due_ms == 0 ? now_ms : job.due_ms,
                   job.max_attempts == 0 ? default_max_attempts : job.max_attempts,
                   now_ms,
                   job.backoff_base_ms,
                   job.backoff_cap_ms,
                   proto::payload_checksum(job.payload.data),
                   job.key.data,
                   job.start_by_ms,
                   job.traceparent,
                   job.tracestate};
}

namespace {
// lib/unique.lua's letter for how long a job holds its unique key.
std::string_view unique_mode(proto::UniqueUntil until) {
  switch (until) {
    case proto::UniqueUntil::waiting: return "w";
    case proto::UniqueUntil::started: return "s";
    case proto::UniqueUntil::done: return "d";
    case proto::UniqueUntil::debounce: return "b";
    default: return "p";
  }
}
}  // namespace

Result<std::vector<EnqueueReply>> parse_enqueue(const redisReply* r, size_t jobs) {
  static constexpr std::array kKnown{EnqueueReply::duplicate, EnqueueReply::accepted, EnqueueReply::backlog_full,
                                     EnqueueReply::accepted_and_leased, EnqueueReply::unique_held,
                                     EnqueueReply::debounced};
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return reply::bad(r, "enqueue");
  if (r->elements < jobs) return fail(Errc::internal, fmt::format("enqueue: {} replies for {} jobs", r->elements, jobs));
  std::vector<EnqueueReply> out;
  out.reserve(jobs);
  size_t held = 0;
  for (size_t i = 0; i < jobs; ++i) {
    const auto c = r->element[i]->type == REDIS_REPLY_INTEGER ? reply::code(r->element[i]->integer, kKnown) : std::nullopt;
    if (!c) return reply::bad(r, "enqueue");
    held += *c == EnqueueReply::unique_held || *c == EnqueueReply::debounced ? 1 : 0;
    out.push_back(*c);
  }
  if (r->elements != jobs + held) return fail(Errc::internal, fmt::format("enqueue: {} replies for {} jobs", r->elements, jobs));
  for (size_t i = jobs; i < r->elements; ++i)
    if (r->element[i]->type != REDIS_REPLY_STRING) return reply::bad(r, "enqueue");
  return out;
}

std::vector<std::string> enqueue_holders(const redisReply* r, size_t jobs) {
  std::vector<std::string> out;
  for (size_t i = jobs; r != nullptr && i < r->elements; ++i) out.push_back(reply::str(r->element[i]));
  return out;
}

Command enqueue(const std::string& queue, const std::vector<const proto::NewJob*>& jobs, int64_t now_ms,
                uint32_t default_max_attempts, int64_t max_backlog, int64_t lease_deadline_ms,
                const std::string& lease_tokens, bool filter_args, bool fair) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::enqueue,
                             {k.schedule, k.ready, k.leased, k.stats, k.jobs, k.done, k.cancelled, k.tokens, k.paused,
                              k.key_limits, k.unique, k.dead, k.fair, k.key_weights, k.key_rates});
  call.add(now_ms).add(max_backlog).add(static_cast<int64_t>(jobs.size()));
  std::vector<uint32_t> partitions;
  partitions.reserve(jobs.size());
  for (const auto* job : jobs) {
    const JobRecord record = new_job_record(*job, now_ms, default_max_attempts);
    call.add(job->id).add(record.due_ms).add(encode_job_record(record));
    partitions.push_back(schedule_partition(job->id));
    call.add(static_cast<int64_t>(partitions.back()));
  }
  for (size_t i = 0; filter_args && i < jobs.size(); ++i)
    call.add("GET").add("u8").add(static_cast<int64_t>(schedule_filter_bit_offset(partitions[i], jobs[i]->id)));
  call.add(lease_deadline_ms).add(lease_tokens);
  int64_t unique = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const proto::NewJob& job = *jobs[i];
    if (job.unique_until == proto::UniqueUntil::none) continue;
    call.add(static_cast<int64_t>(i + 1)).add(job.unique_key.data).add(unique_mode(job.unique_until)).add(job.unique_for_ms);
    ++unique;
  }
  return call.add(unique).add(fair ? "1" : "0");
}

Command register_queue(const std::string& queue) {
  return script_call(lua::ScriptId::register_queue, {kQueuesKey, kLeaderEpochsKey}).add(queue);
}

Command pin_encoding(const std::string& queue, size_t pin_bytes) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::pin_encoding, {k.jobs, k.tokens, k.leased}).add(encoding_pin(pin_bytes));
}

}  // namespace calls

uint32_t Enqueuer::retry_hint(const std::vector<proto::EnqueueOutcome>& outcomes) const {
  const bool overloaded = std::any_of(outcomes.begin(), outcomes.end(), [](const auto& o) {
    return o.status == proto::EnqueueStatus::overloaded;
  });
  return overloaded ? static_cast<uint32_t>(config_.overload_retry_after_ms) : 0u;
}

std::string Enqueuer::backlog_reason(const std::string& queue) const {
  return fmt::format("queue '{}' has {} or more unfinished jobs (max_backlog, scheduled ones included); retry later",
                     queue, config_.policy(queue).max_backlog);
}

void Enqueuer::on_enqueue(EnqueueRequest&& request) {
  // Looked up, not inserted: peers whose requests never wait for a round
  // leave nothing behind.
  const auto found = gathered_.find(request.producer.routing_id);
  const Gathered gathered = found == gathered_.end() ? Gathered{} : found->second;
  size_t payload_bytes = 0;
  for (const auto& job : request.frame.jobs) payload_bytes += job.payload.data.size();
  if (gathered.requests > 0 &&
      (gathered.requests >= kMaxRequestsPerPeer || gathered.payload_bytes + payload_bytes > kMaxPayloadBytesPerPeer)) {
    for (auto& outcome : request.outcomes) {
      if (outcome.status == proto::EnqueueStatus::rejected) continue;
      outcome.status = proto::EnqueueStatus::overloaded;
      outcome.reason = fmt::format("this producer has {} requests ({} bytes of payload) waiting for one round; "
                                   "nothing was written, retry later",
                                   gathered.requests, gathered.payload_bytes);
    }
    outbox_.send(request.producer, proto::EnqueueReply{request.frame.request_id, std::move(request.outcomes),
                                                       static_cast<uint32_t>(config_.overload_retry_after_ms)});
    return;
  }
  for (size_t i = 0; i < request.outcomes.size(); ++i) {
    auto& outcome = request.outcomes[i];
    if (outcome.status == proto::EnqueueStatus::rejected) continue;
    const std::string& name = request.frame.jobs[i].queue;
    if (const QueueState* q = queues_.find(name)) {
      if (q->backlog_full_until_ms > clock_.steady_ms()) {
        outcome.status = proto::EnqueueStatus::overloaded;
        outcome.reason = backlog_reason(name);
      }
      continue;
    }
    if (queues_.size() >= static_cast<size_t>(config_.max_queues)) {
      outcome.status = proto::EnqueueStatus::rejected;
      outcome.reason = fmt::format("the broker keeps at most {} queues (max_queues); '{}' would be one more",
                                   config_.max_queues, name);
      continue;
    }
    queues_.get(name);
  }
  const bool any_to_write = std::any_of(request.outcomes.begin(), request.outcomes.end(), [](const auto& o) {
    return !answered_without_redis(o);
  });
  if (!any_to_write) {
    const uint32_t retry_after_ms = retry_hint(request.outcomes);
    outbox_.send(request.producer, proto::EnqueueReply{request.frame.request_id, std::move(request.outcomes), retry_after_ms});
    return;
  }
  // Counted only once it waits for a round (the round that takes it resets
  // the count).
  Gathered& counted = gathered_[request.producer.routing_id];
  ++counted.requests;
  counted.payload_bytes += payload_bytes;
  enqueues_.push_back(std::move(request));
}

namespace {

}  // namespace

// The requests one round answers. The jobs themselves are in the round's
// calls; only who to answer and with what stays here.
struct Enqueuer::RoundAnswers {
  struct Request {
    Peer producer;
    uint64_t request_id = 0;
    std::vector<proto::EnqueueOutcome> outcomes;
    std::string store_error;  // set when Redis refused a call with jobs of this request
  };
  std::vector<Request> requests;
  bool replicated = true;
};

// The jobs of one queue for one enqueue.lua call, and where each one's
// answer goes: (request, position in it).
struct Enqueuer::EnqueueCall {
  std::vector<const proto::NewJob*> jobs;
  std::vector<std::pair<size_t, size_t>> slots;
};

// What an enqueue call's continuation needs of the call once its reply is in.
struct Enqueuer::SentCall {
  std::string queue;
  int64_t now = 0;
  Dispatcher::Reservation reservation;
  std::vector<std::optional<LeasedJob>> candidates;  // by position: the jobs the call may lease
  std::vector<std::pair<size_t, size_t>> slots;
  std::vector<int64_t> dues;
};

std::vector<EnqueueRequest> Enqueuer::take_writable(Round& round) {
  // Outside a Redis Cluster every queue is writable (its registration is
  // added where its call is built): no look-up per job.
  if (!registration_first_) return std::exchange(enqueues_, {});
  std::map<std::string, bool> writable;  // per queue, asked once a round
  std::vector<EnqueueRequest> ready, waiting;
  for (auto& request : std::exchange(enqueues_, {})) {
    bool all = true;
    for (size_t i = 0; i < request.frame.jobs.size(); ++i) {
      if (answered_without_redis(request.outcomes[i])) continue;
      const std::string& name = request.frame.jobs[i].queue;
      auto [it, fresh] = writable.try_emplace(name, false);
      if (fresh) it->second = ready_for_writes(round, queues_.get(name));
      all = all && it->second;
    }
    (all ? ready : waiting).push_back(std::move(request));
  }
  enqueues_ = std::move(waiting);
  return ready;
}

bool Enqueuer::has_work() const {
  if (!registration_first_) return !enqueues_.empty();
  // A request that waits for a registration in flight needs no round.
  return std::any_of(enqueues_.begin(), enqueues_.end(), [&](const EnqueueRequest& request) {
    for (size_t i = 0; i < request.frame.jobs.size(); ++i) {
      const QueueState* q = queues_.find(request.frame.jobs[i].queue);
      if (q != nullptr && q->registering && !answered_without_redis(request.outcomes[i])) return false;
    }
    return true;
  });
}

namespace {

// Jobs of one schedule filter chunk side by side: the script reads each
// chunk's counters of the batch in one call (the answers follow the slots).
// Not a call with a unique job: of two jobs with one unique key, the first
// sent takes it, and the script goes by argument order.
template <class Call>
Call in_filter_chunk_order(Call&& call) {
  if (std::any_of(call.jobs.begin(), call.jobs.end(), [](const auto* job) { return job->unique_until != proto::UniqueUntil::none; }))
    return std::forward<Call>(call);
  std::vector<uint32_t> chunk;
  chunk.reserve(call.jobs.size());
  for (const auto* job : call.jobs) chunk.push_back(schedule_partition(job->id) / kPartitionsPerFilterChunk);
  std::vector<size_t> order(call.jobs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return chunk[a] < chunk[b]; });
  Call sorted;
  for (size_t i : order) {
    sorted.jobs.push_back(call.jobs[i]);
    sorted.slots.push_back(call.slots[i]);
  }
  return sorted;
}

}  // namespace

void Enqueuer::add_to(Round& round, Dispatcher& dispatcher, bool stopping) {
  if (enqueues_.empty()) return;
  // The requests move into the round; their jobs are encoded into the calls.
  auto requests = take_writable(round);
  gathered_.clear();
  if (requests.empty()) return;
  const int64_t now = clock_.wall_ms();
  auto answers = std::make_shared<RoundAnswers>();
  std::map<std::string, EnqueueCall> open;
  for (size_t r = 0; r < requests.size(); ++r) {
    const auto& request = requests[r];
    for (size_t i = 0; i < request.frame.jobs.size(); ++i) {
      if (answered_without_redis(request.outcomes[i])) continue;
      const auto& job = request.frame.jobs[i];
      auto& call = open[job.queue];
      call.jobs.push_back(&job);
      call.slots.emplace_back(r, i);
      if (call.jobs.size() == kEnqueueChunk) {
        add_call(round, dispatcher, job.queue, std::move(call), now, stopping, answers);
        open.erase(job.queue);
      }
    }
  }
  for (auto& [name, call] : open) add_call(round, dispatcher, name, std::move(call), now, stopping, answers);
  for (auto& request : requests)
    answers->requests.push_back({request.producer, request.frame.request_id, std::move(request.outcomes), {}});
  if (config_.min_replicas > 0) add_wait(round, answers);
  round.then([this, answers](bool applied) { answer(*answers, applied); });
}

void Enqueuer::add_call(Round& round, Dispatcher& dispatcher, const std::string& name, EnqueueCall&& unsorted,
                        int64_t now, bool stopping, const std::shared_ptr<RoundAnswers>& answers) {
  EnqueueCall call = in_filter_chunk_order(std::move(unsorted));
  QueueState& q = queues_.get(name);
  ready_for_writes(round, q);  // true here: registers a new queue outside a Redis Cluster
  const auto& policy = config_.policy(name);
  SentCall sent{name, now, {}, std::vector<std::optional<LeasedJob>>(call.jobs.size()), std::move(call.slots), {}};
  sent.dues.reserve(call.jobs.size());
  for (const auto* job : call.jobs) sent.dues.push_back(job->due_ms == 0 ? now : job->due_ms);
  const auto due_now =
      static_cast<int64_t>(std::count_if(sent.dues.begin(), sent.dues.end(), [&](int64_t d) { return d <= now; }));
  // Leased in the call itself while no older job waits in the ready set
  // (then the lease call of the round leases them in order), and not
  // before WAIT has seen replicas take them (min_replicas).
  // Nor for a paused queue or one with limits: lease.lua applies those.
  const bool lease_here = !q.maybe_ready && config_.min_replicas == 0 && !q.paused && !policy.limited();
  if (lease_here) sent.reservation = dispatcher.reserve(name, due_now, stopping);
  // The lease call of the round takes what the call may leave ready.
  if (due_now > sent.reservation.slots.count || due_now == 0) q.ready_this_round = true;
  std::string lease_tokens;
  const auto& tokens = sent.reservation.tokens;
  for (size_t i = 0, c = 0; i < call.jobs.size() && c < tokens.size(); ++i) {
    if (sent.dues[i] > now) continue;
    sent.candidates[i] = LeasedJob{call.jobs[i]->id, calls::new_job_record(*call.jobs[i], now, policy.max_attempts), 1,
                                   tokens[c]};
    lease_tokens += token_text(tokens[c++]);
  }
  // The filter arguments cost Redis a third of each job's arguments; they
  // are only read while something is scheduled.
  const bool maybe_scheduled = q.next_due_ms >= 0;
  // Built before the continuation takes `sent`: the order in which a
  // call's arguments are evaluated is unspecified.
  Command command = calls::enqueue(name, call.jobs, now, policy.max_attempts, policy.max_backlog,
                                   sent.reservation.deadline_ms, lease_tokens, maybe_scheduled, policy.fair);
  round.add(std::move(command),
            [this, &dispatcher, answers, sent = std::move(sent)](const redisReply* r) mutable {
              on_enqueued(r, dispatcher, *answers, sent);
            });
}

void Enqueuer::on_enqueued(const redisReply* r, Dispatcher& dispatcher, RoundAnswers& answers, SentCall& sent) {
  std::vector<LeasedJob> leased;
  if (r == nullptr) {  // the round failed: answered by the final step
    dispatcher.deliver(sent.queue, sent.reservation, std::move(leased));
    return;
  }
  QueueState& q = queues_.get(sent.queue);
  q.registered = true;
  auto statuses = calls::parse_enqueue(r, sent.slots.size());
  if (!statuses) {
    // Redis refused the call (out of memory, a read-only replica, ...): no
    // job of it is in Redis, and nothing about the jobs was wrong.
    const std::string why = statuses.error().message;
    for (const auto& slot : sent.slots) answers.requests[slot.first].store_error = why;
    if (auto held_back = store_error_log_.admit("", clock_.steady_ms()))
      spdlog::error("enqueue into '{}' failed: {} ({} more failures not logged)", sent.queue, why, *held_back);
    dispatcher.deliver(sent.queue, sent.reservation, std::move(leased));
    return;
  }
  const auto holders = calls::enqueue_holders(r, sent.slots.size());
  size_t next_holder = 0;
  for (size_t j = 0; j < sent.slots.size(); ++j) {
    auto& outcome = answers.requests[sent.slots[j].first].outcomes[sent.slots[j].second];
    switch ((*statuses)[j]) {
      case calls::EnqueueReply::unique_held:
        outcome.status = proto::EnqueueStatus::duplicate;
        outcome.existing_id = holders.at(next_holder++);
        outcome.reason = "another job holds its unique key (existing_id)";
        break;
      case calls::EnqueueReply::debounced:
        outcome.status = proto::EnqueueStatus::duplicate;
        outcome.existing_id = holders.at(next_holder++);
        outcome.reason = "debounced: the waiting job holding its unique key (existing_id) took its payload and due time";
        // That job's due time moved, maybe before any the loop knows of: the
        // next round promotes, and its answer says when the schedule is due.
        q.next_due_ms = earliest_known(q.next_due_ms, sent.now);
        break;
      case calls::EnqueueReply::backlog_full:
        outcome.status = proto::EnqueueStatus::overloaded;
        outcome.reason = backlog_reason(sent.queue);
        q.backlog_full_until_ms = clock_.steady_ms() + kBacklogFullMemoMs;
        break;
      case calls::EnqueueReply::accepted_and_leased:
        outcome.status = proto::EnqueueStatus::accepted;
        // Always a candidate; were it not, its lease would end at the
        // deadline without using an attempt (never sent).
        if (sent.candidates[j]) leased.push_back(std::move(*sent.candidates[j]));
        break;
      case calls::EnqueueReply::accepted:
      case calls::EnqueueReply::duplicate:
        outcome.status = (*statuses)[j] == calls::EnqueueReply::accepted ? proto::EnqueueStatus::accepted
                                                                         : proto::EnqueueStatus::duplicate;
        if (sent.dues[j] > sent.now) q.next_due_ms = earliest_known(q.next_due_ms, sent.dues[j]);
        else q.maybe_ready = true;
        break;
    }
  }
  dispatcher.deliver(sent.queue, sent.reservation, std::move(leased));
}

// Optional: producers are answered accepted only once replicas have the writes.
void Enqueuer::add_wait(Round& round, const std::shared_ptr<RoundAnswers>& answers) {
  round.add(Command{"WAIT", std::to_string(config_.min_replicas), std::to_string(config_.replica_timeout_ms)},
            [this, answers](const redisReply* r) {
              if (r == nullptr) return;
              answers->replicated = r->type == REDIS_REPLY_INTEGER && r->integer >= config_.min_replicas;
              if (!answers->replicated)
                spdlog::warn("WAIT: only {} of {} replicas confirmed; producers are told to retry",
                             r->type == REDIS_REPLY_INTEGER ? r->integer : -1, config_.min_replicas);
            });
}

void Enqueuer::answer(RoundAnswers& answers, bool applied) {
  const auto retry_after = static_cast<uint32_t>(config_.overload_retry_after_ms);
  for (auto& request : answers.requests) {
    std::string unavailable;
    if (!applied) {
      // The round may have run in Redis before the connection broke.
      unavailable = "Redis connection lost while writing; the outcome is unknown: retry with the same ids (a job "
                    "already accepted is answered duplicate)";
    } else if (!request.store_error.empty()) {
      unavailable = "Redis refused the write (" + request.store_error +
                    "); retry with the same ids (jobs already accepted are answered duplicate)";
    } else if (!answers.replicated) {
      // Written on the master but not confirmed by enough replicas: not
      // "accepted". A retry with the same ids is answered "duplicate".
      unavailable = fmt::format("not confirmed by {} replicas within {} ms; retry (same ids are safe)",
                                config_.min_replicas, config_.replica_timeout_ms);
    }
    if (!unavailable.empty()) {
      outbox_.send(request.producer, proto::ErrorFrame{request.request_id, "unavailable", unavailable, retry_after});
      continue;
    }
    const uint32_t retry_after_ms = retry_hint(request.outcomes);
    outbox_.send(request.producer, proto::EnqueueReply{request.request_id, std::move(request.outcomes), retry_after_ms});
  }
}

void Enqueuer::answer_unavailable(const std::string& why, int64_t retry_after_ms) {
  gathered_.clear();
  for (auto& request : std::exchange(enqueues_, {}))
    outbox_.send(request.producer, proto::ErrorFrame{request.frame.request_id, "unavailable",
                                                     why + "; nothing from this request was accepted",
                                                     static_cast<uint32_t>(retry_after_ms)});
}

bool Enqueuer::ready_for_writes(Round& round, QueueState& q) {
  q.written = true;  // the caller's write follows (or, behind a Cluster, follows the registration)
  if (!registration_first_) {
    if (!q.registered || q.deleting) {
      round.add(calls::register_queue(q.name));
      round.add(calls::pin_encoding(q.name, encoding_pin_bytes_));
    }
    return true;
  }
  if (q.registered) {
    if (std::exchange(q.pin_pending, false)) round.add(calls::pin_encoding(q.name, encoding_pin_bytes_));
    return true;
  }
  if (!q.registering) {
    q.registering = true;
    round.add(calls::register_queue(q.name), [this, name = q.name](const redisReply* r) {
      QueueState* q = queues_.find(name);
      if (q == nullptr) return;
      q->registering = false;
      if (r == nullptr || r->type == REDIS_REPLY_ERROR) return;  // tried again by the next write
      q->registered = true;
      q->pin_pending = true;
    });
  }
  return false;
}

}  // namespace dueq::broker
