#include "broker/loop/queue_remover.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "broker/store/keys.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

namespace calls {

Command delete_queue(const std::string& queue) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::delete_queue,
                     {k.schedule, k.legacy_scheduled, k.ready, k.leased, k.dead, k.stats, k.done, k.cancelled, k.jobs,
                      k.tokens, k.attempts, k.errors, k.error_logs, k.cancel_requested, k.started, k.unconfirmed,
                      k.paused, k.rate, k.cron, k.history, k.key_held, k.key_running, k.key_parked, k.key_limits,
                      k.fair, k.key_weights, k.key_rates, k.key_tats, k.key_wakes, k.snoozes, k.results, k.groups, kQueuesKey})
      .add(queue);
}

Result<DeleteQueueOutcome> parse_delete_queue(const redisReply* r) {
  static constexpr std::array kKnown{DeleteQueueStatus::not_empty, DeleteQueueStatus::deleted};
  auto values = reply::integers(r, "delete_queue");
  if (!values) return std::unexpected(values.error());
  if (values->empty()) return reply::bad(r, "delete_queue");
  const auto status = reply::code((*values)[0], kKnown);
  if (!status) return reply::bad(r, "delete_queue");
  if (*status == DeleteQueueStatus::deleted) return DeleteQueueOutcome{*status};
  if (values->size() != 5) return reply::bad(r, "delete_queue");
  return DeleteQueueOutcome{*status, (*values)[1], (*values)[2], (*values)[3], (*values)[4]};
}

}  // namespace calls

void QueueRemover::refuse(const Request& request, const char* code, const std::string& why) {
  outbox_.send(request.peer, proto::ErrorFrame{request.request_id, code, why, 0});
}

void QueueRemover::on_request(const Peer& peer, uint64_t request_id, const std::string& queue) {
  const Request request{peer, request_id, queue};
  if (cluster_)
    return refuse(request, "bad_argument",
                  "queue delete is not supported behind a Redis Cluster (the queue's keys and the registry of queues "
                  "are in different slots, so no one call can check and remove both)");
  const QueueState* q = queues_.find(queue);
  if (q == nullptr || (!q->registered && !q->written && !q->deleting)) return refuse(request, "not_found", "no queue " + queue);
  if (const std::string entry = periodic_entry_(queue); !entry.empty())
    return refuse(request, "bad_argument",
                  fmt::format("the periodic entry '{}' enqueues into queue {}: remove it first (dueq cron remove)", entry, queue));
  if (pending_.size() >= 64) return refuse(request, "overloaded", "64 queue deletes are waiting; retry");
  pending_.push_back(request);
}

void QueueRemover::add_to(Round& round) {
  std::deque<Request> waiting;
  for (auto& request : std::exchange(pending_, {})) {
    QueueState& q = queues_.get(request.queue);
    if (q.deleting) {  // one call per queue at a time
      waiting.push_back(std::move(request));
      continue;
    }
    q.deleting = true;
    q.written = false;  // writes built while the call is out say so again
    round.add(calls::delete_queue(request.queue), [this, request](const redisReply* r) { on_reply(request, r); });
  }
  pending_ = std::move(waiting);
}

void QueueRemover::on_reply(const Request& request, const redisReply* r) {
  QueueState* q = queues_.find(request.queue);
  if (q != nullptr) q->deleting = false;
  if (r == nullptr) {
    // Not known whether it went: the next write registers it again, and
    // so does the broker's reconnect (a failed round closes the link) if
    // the registry still has it.
    if (q != nullptr) {
      q->registered = false;
      q->written = true;
    }
    return refuse(request, "unavailable", "Redis did not answer; nothing or everything was deleted: ask again");
  }
  auto outcome = calls::parse_delete_queue(r);
  if (!outcome) return refuse(request, "internal", outcome.error().message);
  if (outcome->status == DeleteQueueStatus::not_empty) {
    if (q != nullptr) q->registered = q->written = true;  // it still is: the call changed nothing
    return refuse(request, "not_empty",
                  fmt::format("queue {} is not empty: {} scheduled, {} ready, {} running, {} dead (cancel, purge or "
                              "let them run first)",
                              request.queue, outcome->scheduled, outcome->ready, outcome->running, outcome->dead));
  }
  // Writes built while the call was out registered it again; their own
  // continuations say so when they land, and their hints (a due time,
  // ready jobs) stand. With none of them (`written` is set again by each)
  // the queue is empty in Redis: forgotten unless a worker serves it.
  if (q != nullptr) {
    q->registered = false;
    q->paused = false;
    if (!workers_.serves(request.queue) && !q->written)
      queues_.erase(request.queue);
  }
  spdlog::info("queue {} deleted (dueq queue delete)", loggable(request.queue));
  outbox_.send(request.peer, proto::AdminReply{request.request_id, {}, fmt::format("queue {} deleted", request.queue), ""});
}

}  // namespace dueq::broker
