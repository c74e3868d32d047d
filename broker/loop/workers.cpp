#include "broker/loop/workers.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace dueq::broker {

namespace {
constexpr const char* kNewcomerEvicted =
    "was let go: past 1,024 workers (WorkerRegistry::kMaxNewcomers) said HELLO and neither heartbeated nor confirmed "
    "a delivery since";
static_assert(WorkerRegistry::kMaxNewcomers == 1'024, "kNewcomerEvicted names the limit");
}  // namespace

void Workers::on_hello(const Peer& peer, proto::Hello&& hello, int64_t heard_ms) {
  size_t new_queues = 0;
  for (const auto& name : hello.queues) new_queues += queues_.find(name) == nullptr;
  if (queues_.size() + new_queues > static_cast<size_t>(config_.max_queues)) {
    outbox_.send(peer, proto::ErrorFrame{0, "bad_argument",
                                         fmt::format("the broker keeps at most {} queues (max_queues); this HELLO "
                                                     "names {} it does not know",
                                                     config_.max_queues, new_queues),
                                         0});
    if (join_log_.admit(peer.routing_id, heard_ms))
      spdlog::warn("refused the HELLO of {}: it names {} queues the broker does not know, past max_queues {}",
                   loggable(peer.routing_id), new_queues, config_.max_queues);
    return;
  }
  for (const auto& name : hello.queues) queues_.get(name);
  if (auto held_back = join_log_.admit(peer.routing_id, heard_ms))
    spdlog::info("worker {} ({} pid {}) joined: queues [{}], capacity {}{}, holding {}{}", loggable(hello.worker_id),
                 loggable(hello.host), hello.pid, fmt::join(hello.queues, ","), capped(hello.capacity),
                 hello.capacity > capped(hello.capacity)
                     ? fmt::format(" (announced {}; max_worker_capacity)", hello.capacity)
                     : "",
                 hello.held.size(),
                 *held_back > 0 ? fmt::format(" ({} earlier joins of this peer not logged)", *held_back) : "");
  // A HELLO again from a registered worker does not prove it alive: only
  // heartbeats and results do, so a peer that says HELLO over and over and
  // nothing else is declared dead on time and its deliveries go back.
  const WorkerInfo* known = registry_.find(peer.routing_id);
  const int64_t last_seen_ms = known != nullptr ? known->last_seen_ms : heard_ms;
  registry_.upsert(peer.routing_id, WorkerInfo{.worker_id = hello.worker_id, .host = hello.host, .pid = hello.pid,
                                               .key_name = peer.key_name, .key_capacity = peer.key_capacity,
                                                 .queues = hello.queues,
                                                 .weights = hello.weights.empty() ? std::vector<uint32_t>(hello.queues.size(), 1)
                                                                                  : hello.weights,
                                                 .strict = hello.strict, .capacity = capped(hello.capacity),
                                                 .last_seen_ms = last_seen_ms});
  adopt_held(peer.routing_id, hello.held, heard_ms, HeldIn::hello);
  if (known == nullptr && registry_.find(peer.routing_id)->newcomer())
    if (auto evicted = registry_.admit_newcomer(peer.routing_id))
      forget(*evicted, kNewcomerEvicted, heard_ms);
  outbox_.send(peer, proto::Welcome{broker_id_, static_cast<uint32_t>(config_.heartbeat_ms),
                                    static_cast<uint32_t>(config_.worker_timeout_ms),
                                    static_cast<uint32_t>(config_.delivery_timeout_ms)});
}

uint32_t Workers::capped(uint32_t announced) const {
  return std::min(announced, static_cast<uint32_t>(config_.max_worker_capacity));
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
  worker->excused = false;
  worker->heartbeated = true;
  worker->draining = heartbeat.draining;
  registry_.lift_bar(peer.routing_id);
  if (heartbeat.capacity > 0 && capped(heartbeat.capacity) != worker->capacity) {
    spdlog::debug("worker {} capacity {} -> {}", loggable(worker->worker_id), worker->capacity, capped(heartbeat.capacity));
    worker->capacity = capped(heartbeat.capacity);
  }
  adopt_held(peer.routing_id, heartbeat.held, heard_ms, HeldIn::heartbeat);
  flag_missing_received(peer, heartbeat.held, heard_ms);
  outbox_.send(peer, proto::Pong{broker_id_});
}

void Workers::on_received(const Peer& peer, const proto::Received& received, int64_t heard_ms) {
  WorkerInfo* worker = registry_.find(peer.routing_id);
  if (worker == nullptr) return;  // its jobs were handed back already
  worker->note_received(received.seq);
  worker->confirmed = true;
  heard_from(peer.routing_id, heard_ms);
}

void Workers::on_bye(const Peer& peer, const proto::Bye& bye, int64_t heard_ms) {
  if (registry_.find(peer.routing_id) == nullptr) {
    if (!bye.unstarted.empty()) count_stale(peer, bye.unstarted.size(), "handed back by a peer that is not a worker", heard_ms);
    return;
  }
  return_unstarted(peer, bye.unstarted, "handed back by a stopping worker", heard_ms);
  // It still runs what it started: keep it (and its leases) until its
  // heartbeats stop, but send it nothing new.
  if (WorkerInfo* w = registry_.find(peer.routing_id)) {
    w->draining = true;
    w->last_seen_ms = heard_ms;
  }
}

void Workers::on_hand_back(const Peer& peer, const proto::HandBack& hand_back, int64_t heard_ms) {
  if (registry_.find(peer.routing_id) == nullptr) {
    count_stale(peer, hand_back.unstarted.size(), "handed back by a peer that is not a worker", heard_ms);
    return;
  }
  return_unstarted(peer, hand_back.unstarted, "handed back: its worker could not start it soon", heard_ms);
  heard_from(peer.routing_id, heard_ms);
}

void Workers::return_unstarted(const Peer& peer, const std::vector<proto::JobRef>& refs, const char* reason,
                               int64_t heard_ms) {
  size_t stale = 0;
  for (const auto& ref : refs) {
    if (!may_report(peer.routing_id, ref)) {
      ++stale;
      continue;
    }
    inflight_.remove(ref.queue, ref.id, ref.token);
    results_.requeue(ref.queue, NackItem{ref.id, ref.token, NackMode::handed_back, reason, 0, peer.routing_id});
  }
  if (stale > 0) count_stale(peer, stale, "handed back by a worker that does not hold them", heard_ms);
}

void Workers::on_progress(const Peer& peer, proto::Progress&& progress) {
  if (registry_.find(peer.routing_id) == nullptr) return;  // it reports again after its HELLO
  const int64_t now = lease_clock_.now_ms();
  for (auto& item : progress.items) {
    InflightJob* job = inflight_.find(item.queue, item.id);
    if (job == nullptr || job->token != item.token || job->worker != peer.routing_id) continue;
    job->progress_percent = static_cast<int32_t>(item.percent);
    job->progress_text = std::move(item.text.data);
    job->progress_ms = now;
  }
}

void Workers::on_starting(const Peer& peer, const proto::Starting& starting, int64_t heard_ms) {
  if (registry_.find(peer.routing_id) == nullptr) {
    // It asks again after its HELLO (which lists these as held).
    outbox_.send(peer, proto::ErrorFrame{0, "unknown_worker", "say hello first", 0});
    return;
  }
  proto::StartReply reply;
  for (const auto& ref : starting.items) {
    InflightJob* job = inflight_.find(ref.queue, ref.id);
    if (job == nullptr || job->token != ref.token || job->worker != peer.routing_id) {
      reply.drop.push_back(ref);
      continue;
    }
    job->started = true;
    extensions_.extend(ref.queue, TokenRef{ref.id, ref.token}, LeaseReport::started);
    reply.go.push_back(ref);
  }
  if (!reply.drop.empty()) count_stale(peer, reply.drop.size(), "announced as starting by a worker that does not hold them", heard_ms);
  outbox_.send(peer, reply);
  heard_from(peer.routing_id, heard_ms);
}

void Workers::heard_from(const std::string& routing_id, int64_t heard_ms) {
  if (WorkerInfo* w = registry_.find(routing_id)) {
    w->last_seen_ms = heard_ms;
    w->excused = false;
    w->unreachable = false;
  }
}

void Workers::on_results(const Peer& peer, std::vector<proto::JobResult>&& items, int64_t heard_ms) {
  if (registry_.find(peer.routing_id) == nullptr) {
    // Kept by the worker until confirmed, and resent after its HELLO.
    outbox_.send(peer, proto::ErrorFrame{0, "unknown_worker", "say hello first", 0});
    return;
  }
  std::vector<proto::JobResult> held;
  proto::Confirm stale;
  const int64_t lease_now = lease_clock_.now_ms();
  for (auto& item : items) {
    proto::JobRef ref{item.queue, item.id, item.token};
    if (may_report(peer.routing_id, ref)) {
      if (const InflightJob* job = inflight_.find(item.queue, item.id); job != nullptr && metrics_ != nullptr)
        Metrics::finished(metrics_->queue(item.queue), job->type, lease_now - job->delivered_ms);
      held.push_back(std::move(item));
    } else {
      stale.items.push_back(std::move(ref));
    }
  }
  if (!stale.items.empty()) {
    count_stale(peer, stale.items.size(), "reported by a worker that does not hold them", heard_ms);
    outbox_.send(peer, stale);
  }
  if (!held.empty()) results_.on_results(peer, std::move(held));
  heard_from(peer.routing_id, heard_ms);
}

void Workers::on_delivery_expired(const InflightJob& job) {
  const WorkerInfo* w = registry_.find(job.worker);
  if (w != nullptr && !w->confirmed_receipt(job)) registry_.bar(job.worker);
}

bool Workers::may_report(const std::string& routing_id, const proto::JobRef& ref) {
  const InflightJob* job = inflight_.find(ref.queue, ref.id);
  if (job != nullptr) return job->token == ref.token && job->worker == routing_id;
  // Unknown to the broker: Redis decides by token, but only in a queue that
  // exists there (a report naming any other would create keys for it).
  const QueueState* q = queues_.find(ref.queue);
  return q != nullptr && q->registered;
}

void Workers::count_stale(const Peer& peer, size_t count, const char* what, int64_t heard_ms) {
  stale_reports_ += count;
  if (auto held_back = stale_log_.admit(peer.routing_id, heard_ms))
    spdlog::warn("peer {}: {} deliveries {} ({} stale reports in total, {} lines about this peer held back)",
                 loggable(peer.routing_id), count, what, stale_reports_, *held_back);
}

void Workers::flag_missing_received(const Peer& peer, const std::vector<proto::JobRef>& held, int64_t heard_ms) {
  WorkerInfo* w = registry_.find(peer.routing_id);
  if (w == nullptr || w->unread_frames.empty()) return;
  const WorkerInfo::UnreadFrame& oldest = w->unread_frames.front();
  if (oldest.seq == w->missing_received_seq || lease_clock_.now_ms() - oldest.sent_ms < config_.delivery_timeout_ms) return;
  const bool lists_it = std::any_of(held.begin(), held.end(), [&](const proto::JobRef& ref) {
    const InflightJob* job = inflight_.find(ref.queue, ref.id);
    return job != nullptr && job->token == ref.token && job->worker == peer.routing_id && job->frame_seq >= oldest.seq;
  });
  if (!lists_it) return;
  w->missing_received_seq = oldest.seq;
  outbox_.send(peer, proto::ErrorFrame{0, "bad_frame",
                                       fmt::format("TASKS seq {} was never confirmed with RECEIVED, yet its jobs are "
                                                   "listed as held (protocol §3.3: RECEIVED comes first); until "
                                                   "RECEIVED, at most {} jobs are sent",
                                                   oldest.seq, WorkerRegistry::kUnconfirmedCredit),
                                       0});
  if (auto held_back = unreceived_log_.admit(peer.routing_id, heard_ms))
    spdlog::warn("worker {} holds jobs of TASKS seq {} without having sent RECEIVED for it (a client that skips "
                 "RECEIVED){}",
                 loggable(w->worker_id), oldest.seq,
                 *held_back > 0 ? fmt::format(" ({} more such lines held back)", *held_back) : "");
}

void Workers::adopt_held(const std::string& routing_id, const std::vector<proto::JobRef>& held, int64_t heard_ms,
                         HeldIn where) {
  const bool confirms = where == HeldIn::hello;
  const int64_t lease_now = lease_clock_.now_ms();
  size_t stale = 0;
  for (const auto& ref : held) {
    InflightJob* job = inflight_.find(ref.queue, ref.id);
    if (job == nullptr && !may_report(routing_id, ref)) {
      ++stale;  // a queue that does not exist in Redis
      continue;
    }
    if (job == nullptr || job->token != ref.token) {
      // A job leased before this broker started (or re-leased since): Redis
      // decides by token whether this worker's delivery is still current.
      // Its holder is confirmed only once Redis extends the lease
      // (LeaseExtensions): a forged token lifts no credit.
      if (job == nullptr)
        inflight_.add(InflightJob{ref.queue, ref.id, ref.token, routing_id, lease_now, true, false, 0, lease_now, confirms});
      extensions_.extend(ref.queue, TokenRef{ref.id, ref.token}, LeaseReport::held);
      continue;
    }
    // A live worker keeps what it was given: another peer naming the same
    // delivery takes nothing over (a worker declared dead is replaced).
    if (job->worker != routing_id && registry_.find(job->worker) != nullptr) {
      ++stale;
      continue;
    }
    inflight_.assign(*job, routing_id);
    if (WorkerInfo* w = registry_.find(routing_id); w != nullptr && confirms) w->confirmed = true;
    const bool short_of_time = !job->reported || job->lease_deadline_ms - lease_now < config_.lease_ttl_ms / 2;
    job->reported = true;
    if (!short_of_time) continue;
    if (lease_now - job->delivered_ms >= config_.policy(ref.queue).max_run_time_ms) {
      // Held past max_run_time: the lease is left to run out, and Redis
      // gives the job back (a peer that heartbeats and never finishes its
      // jobs cannot keep them).
      if (auto held_back = overdue_log_.admit(routing_id, heard_ms))
        spdlog::warn("worker {} has held a job of queue {} past its max_run_time ({} ms); its lease is not renewed{}",
                     loggable(routing_id), loggable(ref.queue), config_.policy(ref.queue).max_run_time_ms,
                     *held_back > 0 ? fmt::format(" ({} more such lines held back)", *held_back) : "");
      continue;
    }
    extensions_.extend(ref.queue, TokenRef{ref.id, ref.token}, LeaseReport::held);
  }
  if (stale > 0) {
    const Peer peer{routing_id, false};
    count_stale(peer, stale, "listed as held by a worker that was not given them", heard_ms);
  }
}

void Workers::forget(const std::string& routing_id, const char* reason, int64_t now_ms) {
  WorkerInfo* w = registry_.find(routing_id);
  if (w == nullptr) return;
  auto held = inflight_.take_held_by(routing_id);
  // One key for all: a flood of peers that say HELLO and fall silent is
  // summed up in the next line written.
  if (auto held_back = loss_log_.admit("", now_ms))
    spdlog::info("worker {} {}; re-delivering {} jobs it held{}", loggable(w->worker_id), reason, held.size(),
                 *held_back > 0 ? fmt::format(" ({} more workers lost, not logged)", *held_back) : "");
  // The evidence names a job only when nothing else can have run beside
  // it: the one announced job of the worker, delivered to run alone or the
  // only job it held (one delivered without a start check may have started
  // unseen). Any other announced job is retried free, alone next time.
  const auto started = std::count_if(held.begin(), held.end(), [](const InflightJob& j) { return j.started; });
  for (auto& job : held) {
    // A peer that took deliveries and vanished before confirming any is
    // sent nothing more under its routing id until it heartbeats.
    if (!w->confirmed_receipt(job)) registry_.bar(routing_id);
    if (job.started && started == 1 && (job.alone || held.size() == 1)) {
      results_.requeue(job.queue, NackItem{job.id, job.token, NackMode::now, "worker died while running it", 0, routing_id,
                                           job.delivered_ms});
      continue;
    }
    if (job.started) {
      results_.requeue(job.queue, NackItem{job.id, job.token, NackMode::shared,
                                           "worker died while running it beside other jobs", 0, routing_id,
                                           job.delivered_ms});
      continue;
    }
    // Buffered, or started without the broker seeing it: no attempt, and its
    // next worker announces the start. A start a broker before this one
    // recorded in Redis is charged only where the same rule names the job:
    // delivered to run alone, or the only job its worker held.
    results_.requeue(job.queue, NackItem{job.id, job.token, job.alone || held.size() == 1 ? NackMode::lost : NackMode::lost_beside,
                                         "worker lost (no heartbeat)", 0, routing_id, job.delivered_ms});
  }
  const std::vector<std::string> served = w->queues;
  registry_.remove(routing_id);
  // A queue no job was ever enqueued into (not in Redis) that no live
  // worker serves any more is forgotten: HELLOs naming made-up queues do
  // not pile up.
  for (const auto& name : served) {
    const QueueState* q = queues_.find(name);
    if (q == nullptr || q->registered || q->written || registry_.serves(name)) continue;
    queues_.erase(name);
  }
}

void Workers::expire_silent(int64_t all_read_ms) {
  // Its unread TASKS fill max_unread_mib and it confirmed none of them for
  // worker_timeout: no more is queued for it, and what it held goes back
  // now, not when its leases run out.
  for (const auto& rid : registry_.stopped_reading(config_.max_unread_bytes(),
                                                   lease_clock_.now_ms() - config_.worker_timeout_ms))
    forget(rid, "stopped reading its socket (max_unread_mib of tasks unconfirmed)", all_read_ms);
  for (const auto& rid : registry_.silent_since(all_read_ms - config_.worker_timeout_ms)) {
    // A worker that said BYE and then went quiet drained and left; any other
    // silence is a loss.
    const WorkerInfo* w = registry_.find(rid);
    forget(rid, w != nullptr && w->draining ? "drained and left" : "stopped heartbeating", all_read_ms);
  }
}

int64_t Workers::next_expiry_ms() const {
  if (registry_.size() == 0) return -1;
  return registry_.oldest_seen_ms() + config_.worker_timeout_ms + 1;
}

namespace {
// " (42% copying pages)" for a delivery whose handler reported progress,
// its text cut to kListedProgressBytes (at a UTF-8 character's start) so
// that a listing stays well within a frame.
constexpr size_t kListedProgressBytes = 64;
std::string progress_note(const InflightJob& job) {
  if (job.progress_percent < 0) return "";
  if (job.progress_text.empty()) return fmt::format(" ({}%)", job.progress_percent);
  std::string_view text = job.progress_text;
  if (text.size() > kListedProgressBytes) {
    size_t cut = kListedProgressBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut);
  }
  return fmt::format(" ({}% {}{})", job.progress_percent, text, text.size() < job.progress_text.size() ? "..." : "");
}
}  // namespace

void Workers::on_list(const Peer& peer, uint64_t request_id, int64_t heard_ms) {
  // A listing walks every delivery on the event loop: one per interval,
  // whoever asks, so that no peer asking without end stalls dispatch.
  if (heard_ms < next_list_ms_) {
    outbox_.send(peer, proto::ErrorFrame{request_id, "overloaded",
                                         fmt::format("one workers listing per {} ms; retry", kListIntervalMs),
                                         static_cast<uint32_t>(next_list_ms_ - heard_ms)});
    return;
  }
  next_list_ms_ = heard_ms + kListIntervalMs;
  // Jobs each worker holds, as the broker knows them (its deliveries).
  std::map<std::string, std::vector<const InflightJob*>> held;
  inflight_.for_each([&](const InflightJob& job) { held[job.worker].push_back(&job); });
  const int64_t lease_now = lease_clock_.now_ms();
  proto::AdminReply reply{request_id, {}, "", ""};
  size_t listed = 0;
  registry_.for_each([&](const std::string& rid, const WorkerInfo& w) {
    if (listed++ >= kMaxWorkersListed) return;
    std::string queues, jobs;
    for (size_t i = 0; i < w.queues.size(); ++i)
      queues += fmt::format("{}{}:{}", i == 0 ? "" : ",", w.queues[i], i < w.weights.size() ? w.weights[i] : 1);
    auto& mine = held[rid];
    std::sort(mine.begin(), mine.end(), [](const auto* a, const auto* b) { return a->delivered_ms < b->delivered_ms; });
    for (size_t i = 0; i < mine.size() && i < kMaxJobsListed; ++i)
      jobs += fmt::format("{}{}/{} {}{} ms{}", i == 0 ? "" : ", ", mine[i]->queue, mine[i]->id,
                          mine[i]->started ? "running " : "held ", lease_now - mine[i]->delivered_ms, progress_note(*mine[i]));
    if (mine.size() > kMaxJobsListed) jobs += fmt::format(", and {} more", mine.size() - kMaxJobsListed);
    reply.rows.push_back({{"worker", w.worker_id},
                          {"host", w.host},
                          {"pid", std::to_string(w.pid)},
                          {"key", w.key_name},
                          {"queues", queues},
                          {"strict", w.strict ? "yes" : "no"},
                          {"capacity", std::to_string(w.capacity)},
                          {"held", std::to_string(mine.size())},
                          {"heard_ms_ago", std::to_string(std::max<int64_t>(0, heard_ms - w.last_seen_ms))},
                          {"draining", w.draining ? "yes" : "no"},
                          {"jobs", jobs}});
  });
  reply.summary = listed > kMaxWorkersListed ? fmt::format("{} workers (the first {} listed)", listed, kMaxWorkersListed)
                                             : fmt::format("{} workers", listed);
  outbox_.send(peer, reply);
}

}  // namespace dueq::broker
