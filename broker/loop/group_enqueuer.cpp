#include "broker/loop/group_enqueuer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>

#include "broker/store/job_record.hpp"
#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"

namespace dueq::broker {

namespace calls {

namespace {
std::string_view policy_letter(proto::ChildFailure on_failure) {
  switch (on_failure) {
    case proto::ChildFailure::fail_parent: return "f";
    case proto::ChildFailure::ignore: return "i";
    case proto::ChildFailure::proceed: return "c";
    default: return "-";
  }
}
std::string_view role_letter(proto::GroupRole role) {
  switch (role) {
    case proto::GroupRole::on_success: return "s";
    case proto::GroupRole::on_complete: return "c";
    default: return "j";
  }
}
std::string_view batch_action(proto::BatchAction action) {
  switch (action) {
    case proto::BatchAction::open: return "open";
    case proto::BatchAction::add: return "add";
    default: return "none";
  }
}
}  // namespace

Command enqueue_group(const proto::GroupEnqueue& request, int64_t now_ms, uint32_t default_max_attempts,
                      int64_t max_backlog, int64_t retention_s, int64_t max_batch_members) {
  QueueKeys k(request.queue);
  Command call = script_call(lua::ScriptId::enqueue_group,
                             {k.schedule, k.ready, k.leased, k.stats, k.jobs, k.done, k.cancelled, k.groups, k.fair});
  call.add(now_ms).add(max_backlog).add(request.batch_id).add(batch_action(request.batch));
  call.add(request.close ? "1" : "0").add(retention_s).add(max_batch_members);
  call.add(static_cast<int64_t>(request.jobs.size()));
  for (const auto& g : request.jobs) {
    const JobRecord record = new_job_record(g.job, now_ms, default_max_attempts);
    call.add(g.job.id).add(record.due_ms).add(encode_job_record(record));
    call.add(static_cast<int64_t>(schedule_partition(g.job.id))).add(static_cast<int64_t>(g.parent));
    call.add(policy_letter(g.on_failure)).add(role_letter(g.role));
  }
  return call;
}

Result<GroupEnqueueOutcome> parse_enqueue_group(const redisReply* r) {
  static constexpr std::array kKnown{GroupEnqueued::duplicate,  GroupEnqueued::accepted,     GroupEnqueued::backlog_full,
                                     GroupEnqueued::no_batch,   GroupEnqueued::batch_closed, GroupEnqueued::batch_exists,
                                     GroupEnqueued::batch_full};
  auto values = reply::integers(r, "enqueue_group");
  if (!values) return std::unexpected(values.error());
  if (values->size() != 3) return reply::bad(r, "enqueue_group");
  const auto code = reply::code((*values)[0], kKnown);
  if (!code) return reply::bad(r, "enqueue_group");
  return GroupEnqueueOutcome{*code, (*values)[1], (*values)[2]};
}

}  // namespace calls

std::optional<GroupProblem> group_problem(const proto::GroupEnqueue& request) {
  using proto::ChildFailure;
  using proto::GroupRole;
  std::vector<size_t> depth(request.jobs.size(), 1);
  bool success = false, complete = false;
  for (size_t i = 0; i < request.jobs.size(); ++i) {
    const auto& g = request.jobs[i];
    auto at = [&](std::string reason) { return GroupProblem{std::move(reason), static_cast<int64_t>(i)}; };
    if (!g.job.queue.empty() && g.job.queue != request.queue) return at("a job of a group is in the request's queue");
    if (g.job.unique_until != proto::UniqueUntil::none) return at("a job of a flow or batch may not be unique");
    if (g.parent > i) return at("its parent is not a job before it (parent numbers count from 1)");
    if ((g.parent == 0) != (g.on_failure == ChildFailure::none) || g.on_failure > ChildFailure::proceed)
      return at("a child has a failure policy (fail_parent, ignore or proceed), a root none");
    if (g.role > GroupRole::on_complete) return at("role: job, on_success or on_complete");
    if (g.role != GroupRole::job) {
      bool& seen = g.role == GroupRole::on_success ? success : complete;
      if (request.batch != proto::BatchAction::open || g.parent != 0 || seen)
        return at("a callback is only for a batch being opened, one of each kind, without a parent");
      seen = true;
    }
    if (g.parent > 0) {
      if (request.jobs[g.parent - 1].role != GroupRole::job) return at("a callback cannot have children");
      depth[i] = depth[g.parent - 1] + 1;
      if (depth[i] > proto::GroupEnqueue::kMaxDepth)
        return at(fmt::format("a flow has at most {} levels, its root included", proto::GroupEnqueue::kMaxDepth));
    }
  }
  return std::nullopt;
}

void GroupEnqueuer::refuse(const Peer& producer, uint64_t request_id, proto::GroupStatus status, std::string reason) {
  const uint32_t retry = status == proto::GroupStatus::overloaded ? static_cast<uint32_t>(config_.overload_retry_after_ms) : 0;
  outbox_.send(producer, proto::GroupEnqueueReply{request_id, status, std::move(reason), -1, retry});
}

void GroupEnqueuer::on_request(const Peer& producer, proto::GroupEnqueue&& request) {
  size_t from_peer = 0, peer_bytes = 0, bytes = 0;
  for (const auto& g : requests_)
    if (g.producer.routing_id == producer.routing_id) ++from_peer, peer_bytes += g.payload_bytes;
  for (const auto& g : request.jobs) bytes += g.job.payload.data.size();
  const bool over_bytes = from_peer > 0 && (peer_bytes + bytes > kMaxPayloadBytesPerPeer || gathered_bytes_ + bytes > kMaxPayloadBytes);
  if (requests_.size() >= kMaxGathered || from_peer >= kMaxGatheredPerPeer || over_bytes)
    return refuse(producer, request.request_id, proto::GroupStatus::overloaded,
                  fmt::format("{} group requests ({} bytes of payload) wait for one round, {} of them ({} bytes) this "
                              "producer's; nothing was written, retry later",
                              requests_.size(), gathered_bytes_, from_peer, peer_bytes));
  if (queues_.find(request.queue) == nullptr && queues_.size() >= static_cast<size_t>(config_.max_queues))
    return refuse(producer, request.request_id, proto::GroupStatus::rejected,
                  fmt::format("the broker keeps at most {} queues (max_queues); '{}' would be one more",
                              config_.max_queues, request.queue));
  QueueState& q = queues_.get(request.queue);
  if (q.backlog_full_until_ms > clock_.steady_ms())
    return refuse(producer, request.request_id, proto::GroupStatus::overloaded,
                  fmt::format("queue '{}' has {} or more unfinished jobs (max_backlog); retry later", request.queue,
                              config_.policy(request.queue).max_backlog));
  gathered_bytes_ += bytes;
  requests_.push_back(Gathered{producer, std::move(request), bytes});
}

bool GroupEnqueuer::has_work() const {
  return std::any_of(requests_.begin(), requests_.end(), [&](const Gathered& g) {
    const QueueState* q = queues_.find(g.frame.queue);
    return q == nullptr || !q->registering;
  });
}

std::vector<GroupEnqueuer::Gathered> GroupEnqueuer::take_for_round(Round& round) {
  // Each request's turn: its rank among its producer's requests.
  std::map<std::string, size_t> seen;
  std::vector<std::pair<size_t, size_t>> order;  // (turn, index), arrival order within a turn
  for (size_t i = 0; i < requests_.size(); ++i) order.emplace_back(seen[requests_[i].producer.routing_id]++, i);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<bool> taken(requests_.size(), false);
  std::map<std::string, bool> writable;  // per queue, asked once a round
  size_t jobs = 0;
  for (const auto& [turn, i] : order) {
    const auto& g = requests_[i];
    if (jobs > 0 && jobs + g.frame.jobs.size() > kMaxJobsPerRound) break;
    auto [it, fresh] = writable.try_emplace(g.frame.queue, false);
    if (fresh) it->second = enqueuer_.ready_for_writes(round, queues_.get(g.frame.queue));
    if (!it->second) continue;
    taken[i] = true;
    jobs += g.frame.jobs.size();
  }
  std::vector<Gathered> sent, left;
  for (size_t i = 0; i < requests_.size(); ++i) (taken[i] ? sent : left).push_back(std::move(requests_[i]));
  requests_ = std::move(left);
  gathered_bytes_ = 0;
  for (const auto& g : requests_) gathered_bytes_ += g.payload_bytes;
  // In arrival order: two requests of one producer are written as sent.
  return sent;
}

void GroupEnqueuer::add_to(Round& round) {
  if (requests_.empty()) return;
  const int64_t now = clock_.wall_ms();
  auto answers = std::make_shared<RoundAnswers>();
  std::vector<Gathered> sent = take_for_round(round);
  if (sent.empty()) return;
  answers->answers.resize(sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    const auto& policy = config_.policy(sent[i].frame.queue);
    answers->answers[i].producer = sent[i].producer;
    answers->answers[i].request_id = sent[i].frame.request_id;
    Command call = calls::enqueue_group(sent[i].frame, now, policy.max_attempts, policy.max_backlog, policy.done_retention_s);
    round.add(std::move(call), [this, answers, i, now, g = std::make_shared<Gathered>(std::move(sent[i]))](const redisReply* r) {
      on_enqueued(r, *g, now, answers->answers[i]);
    });
  }
  if (config_.min_replicas > 0)
    round.add(Command{"WAIT", std::to_string(config_.min_replicas), std::to_string(config_.replica_timeout_ms)},
              [answers, this](const redisReply* r) {
                if (r == nullptr) return;
                answers->replicated = r->type == REDIS_REPLY_INTEGER && r->integer >= config_.min_replicas;
              });
  round.then([this, answers](bool applied) { answer(*answers, applied); });
}

void GroupEnqueuer::on_enqueued(const redisReply* r, const Gathered& sent, int64_t now, Answer& answer) {
  if (r == nullptr) return;  // the round failed: answered by answer()
  auto outcome = calls::parse_enqueue_group(r);
  if (!outcome) {
    answer.store_error = outcome.error().message;
    spdlog::error("group enqueue into '{}' failed: {}", loggable(sent.frame.queue), answer.store_error);
    return;
  }
  QueueState& q = queues_.get(sent.frame.queue);
  q.registered = true;
  auto& reply = answer.reply;
  reply.request_id = sent.frame.request_id;
  switch (outcome->code) {
    case calls::GroupEnqueued::accepted: {
      // Every job went to the schedule: a leaf due now is promoted next.
      int64_t earliest = -1;
      for (const auto& g : sent.frame.jobs) {
        const int64_t due = std::max(g.job.due_ms == 0 ? now : g.job.due_ms, now);
        earliest = earliest < 0 ? due : std::min(earliest, due);
      }
      q.released_at(earliest);
      q.released_at(outcome->released_due_ms);
      reply.status = proto::GroupStatus::accepted;
      break;
    }
    case calls::GroupEnqueued::duplicate:
      reply.status = proto::GroupStatus::duplicate;
      reply.job_index = outcome->job_number - 1;
      reply.reason = "the queue knows a job with this id already; nothing of the request was stored";
      break;
    case calls::GroupEnqueued::backlog_full:
      q.backlog_full_until_ms = clock_.steady_ms() + Enqueuer::kBacklogFullMemoMs;
      reply.status = proto::GroupStatus::overloaded;
      reply.reason = fmt::format("queue '{}' has no room for {} more jobs under its max_backlog of {}; nothing was stored",
                                 sent.frame.queue, sent.frame.jobs.size(), config_.policy(sent.frame.queue).max_backlog);
      reply.retry_after_ms = static_cast<uint32_t>(config_.overload_retry_after_ms);
      break;
    case calls::GroupEnqueued::no_batch:
      reply.status = proto::GroupStatus::no_batch;
      reply.reason = "no batch of this id in the queue (open it first)";
      break;
    case calls::GroupEnqueued::batch_closed:
      reply.status = proto::GroupStatus::batch_closed;
      reply.reason = "the batch is closed: it takes no more members";
      break;
    case calls::GroupEnqueued::batch_exists:
      reply.status = proto::GroupStatus::batch_exists;
      reply.reason = "a batch of this id exists in the queue already";
      break;
    case calls::GroupEnqueued::batch_full:
      reply.status = proto::GroupStatus::batch_full;
      reply.reason = fmt::format("a batch has at most {} members; nothing was stored", proto::GroupEnqueue::kMaxBatchMembers);
      break;
  }
}

void GroupEnqueuer::answer(RoundAnswers& answers, bool applied) {
  const auto retry_after = static_cast<uint32_t>(config_.overload_retry_after_ms);
  for (auto& a : answers.answers) {
    std::string unavailable;
    if (!applied)
      unavailable = "Redis connection lost while writing; the outcome is unknown: send the same request again (a flow "
                    "already stored is answered duplicate)";
    else if (!a.store_error.empty())
      unavailable = "Redis refused the write (" + a.store_error + "); nothing was stored, retry";
    else if (!answers.replicated)
      unavailable = fmt::format("not confirmed by {} replicas within {} ms; send the same request again",
                                config_.min_replicas, config_.replica_timeout_ms);
    if (!unavailable.empty()) {
      outbox_.send(a.producer, proto::ErrorFrame{a.request_id, "unavailable", unavailable, retry_after});
      continue;
    }
    outbox_.send(a.producer, a.reply);
  }
}

void GroupEnqueuer::answer_unavailable(const std::string& why, int64_t retry_after_ms) {
  gathered_bytes_ = 0;
  for (auto& g : std::exchange(requests_, {}))
    outbox_.send(g.producer, proto::ErrorFrame{g.frame.request_id, "unavailable",
                                               why + "; nothing from this request was stored",
                                               static_cast<uint32_t>(retry_after_ms)});
}

}  // namespace dueq::broker
