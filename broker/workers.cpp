#include "broker/workers.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace dueq::broker {

void Workers::on_hello(const Peer& peer, proto::Hello&& hello, int64_t heard_ms) {
  for (const auto& name : hello.queues) queues_.get(name);
  spdlog::info("worker {} ({} pid {}) joined: queues [{}], capacity {}, holding {}", hello.worker_id, hello.host,
               hello.pid, fmt::join(hello.queues, ","), hello.capacity, hello.held.size());
  registry_.upsert(peer.routing_id, WorkerInfo{hello.worker_id, hello.queues, hello.capacity, false, heard_ms});
  adopt_held(peer.routing_id, hello.held);
  outbox_.send(peer, proto::Welcome{broker_id_, static_cast<uint32_t>(config_.heartbeat_ms)});
}

void Workers::on_heartbeat(const Peer& peer, const proto::Heartbeat& heartbeat, int64_t heard_ms) {
  WorkerInfo* worker = registry_.find(peer.routing_id);
  if (worker == nullptr) {
    // The broker restarted or declared this worker dead: it must say hello
    // again, reporting what it holds.
    outbox_.send(peer, proto::ErrorFrame{0, "unknown_worker", "say hello first", 0});
    return;
  }
  worker->last_seen_ms = heard_ms;
  worker->draining = heartbeat.draining;
  if (heartbeat.capacity > 0) worker->capacity = heartbeat.capacity;
  adopt_held(peer.routing_id, heartbeat.held);
  outbox_.send(peer, proto::Pong{broker_id_});
}

void Workers::on_bye(const Peer& peer, const proto::Bye& bye, int64_t heard_ms) {
  for (const auto& ref : bye.unstarted) {
    inflight_.remove(ref.queue, ref.id, ref.token);
    results_.requeue(ref.queue, NackItem{ref.id, ref.token, NackMode::handed_back, "handed back by a stopping worker", 0});
  }
  // It still runs what it started: keep it (and its leases) until its
  // heartbeats stop, but send it nothing new.
  if (WorkerInfo* w = registry_.find(peer.routing_id)) {
    w->draining = true;
    w->last_seen_ms = heard_ms;
  }
}

void Workers::heard_from(const std::string& routing_id, int64_t heard_ms) {
  if (WorkerInfo* w = registry_.find(routing_id)) w->last_seen_ms = heard_ms;
}

void Workers::adopt_held(const std::string& routing_id, const std::vector<proto::JobRef>& held) {
  const int64_t lease_now = lease_clock_.now_ms();
  for (const auto& ref : held) {
    InflightJob* job = inflight_.find(ref.queue, ref.id);
    if (job == nullptr || job->token != ref.token) {
      // A job leased before this broker started (or re-leased since): Redis
      // decides by token whether this worker's delivery is still current.
      if (job == nullptr) inflight_.add(InflightJob{ref.queue, ref.id, ref.token, routing_id, lease_now});
      results_.extend(ref.queue, TokenRef{ref.id, ref.token});
      continue;
    }
    inflight_.assign(*job, routing_id);
    if (job->lease_deadline_ms - lease_now < config_.lease_ttl_ms / 2) results_.extend(ref.queue, TokenRef{ref.id, ref.token});
  }
}

void Workers::forget(const std::string& routing_id, const char* reason) {
  WorkerInfo* w = registry_.find(routing_id);
  if (w == nullptr) return;
  auto held = inflight_.take_held_by(routing_id);
  spdlog::info("worker {} {}; re-delivering {} jobs it held", w->worker_id, reason, held.size());
  for (auto& job : held)
    results_.requeue(job.queue, NackItem{job.id, job.token, NackMode::now, "worker lost (no heartbeat)", 0});
  registry_.remove(routing_id);
}

void Workers::expire_silent(int64_t read_empty_ms) {
  for (const auto& rid : registry_.silent_since(read_empty_ms - config_.worker_timeout_ms)) forget(rid, "stopped heartbeating");
}

int64_t Workers::next_expiry_ms() const {
  if (registry_.size() == 0) return -1;
  return registry_.oldest_seen_ms() + config_.worker_timeout_ms + 1;
}

}  // namespace dueq::broker
