#include "broker/loop/dispatcher.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <set>

#include "broker/loop/batch_placer.hpp"
#include "broker/store/keys.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

namespace {

// Fencing tokens: 64 bits from the kernel's CSPRNG per delivery, so that no
// token can be guessed from others a worker has seen, and none repeats after
// Redis lost writes it had acknowledged (a counter in Redis would roll back
// and hand a late ack of the first delivery the second one's token).
std::vector<uint64_t> random_tokens(size_t count) {
  std::vector<uint64_t> tokens(count);
  size_t filled = 0;
  auto* bytes = reinterpret_cast<char*>(tokens.data());
  while (filled < count * sizeof(uint64_t)) {
    const ssize_t n = ::getrandom(bytes + filled, count * sizeof(uint64_t) - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
    else if (errno != EINTR) {
      // Only a kernel older than 3.17 fails here: no broker runs without
      // tokens nobody can guess.
      spdlog::critical("getrandom failed: {}", errno_text(errno));
      std::abort();
    }
  }
  for (auto& t : tokens)
    if (t == 0) t = 1;  // 0 is never a valid token; 1 is as likely as any other
  return tokens;
}

}  // namespace

namespace calls {

Command lease(const std::string& queue, int64_t deadline_ms, int count, const LeaseLimits& limits) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::lease,
                             {k.ready, k.leased, k.jobs, k.tokens, k.attempts, k.unconfirmed, k.paused, k.rate,
                              k.key_held, k.key_running, k.key_parked, k.key_limits, k.unique, k.fair,
                              k.key_rates, k.key_tats, k.key_wakes});
  call.add(deadline_ms).add(count);
  std::string tokens;
  tokens.reserve(16 * static_cast<size_t>(count));
  for (const uint64_t token : random_tokens(static_cast<size_t>(count))) tokens += token_text(token);
  return call.add(tokens)
      .add(limits.now_ms)
      .add(limits.concurrency)
      .add(fmt::format("{}", limits.rate))
      .add(limits.burst)
      .add(limits.per_key)
      .add(limits.ordered ? "1" : "0")
      .add(limits.fair ? "1" : "0")
      .add(fmt::format("{}", limits.key_rate))
      .add(limits.key_rate_burst);
}

Result<LeaseBatch> parse_lease(const redisReply* r) {
  constexpr size_t kPerJob = 5, kTrailer = 3;
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements < kTrailer || (r->elements - kTrailer) % kPerJob != 0)
    return reply::bad(r, "lease");
  LeaseBatch out;
  const int64_t held_by = reply::num(r->element[r->elements - 3]);
  if (held_by < 0 || held_by > static_cast<int64_t>(LeaseHold::keys)) return reply::bad(r, "lease");
  out.held_by = static_cast<LeaseHold>(held_by);
  out.wait_ms = reply::num(r->element[r->elements - 2]);
  out.key_wake_ms = reply::num(r->element[r->elements - 1]);
  const size_t job_values = r->elements - kTrailer;
  out.jobs.reserve(job_values / kPerJob);
  for (size_t i = 0; i < job_values; i += kPerJob) {
    redisReply** e = r->element + i;
    if (e[1]->type != REDIS_REPLY_STRING) return reply::bad(r, "lease");
    auto token = token_from_text(reply::str(e[3]));
    if (!token) return reply::bad(r, "lease");
    auto record = decode_job_record(std::string_view(e[1]->str, e[1]->len));
    if (!record) {
      out.unreadable.push_back(NackItem{reply::str(e[0]), *token, NackMode::dead,
                                        "unreadable record: " + record.error().message, 0});
      continue;
    }
    const int64_t check = reply::num(e[4]);
    if (check < 0 || check > static_cast<int64_t>(proto::StartCheck::announce_alone)) return reply::bad(r, "lease");
    out.jobs.push_back(LeasedJob{reply::str(e[0]), std::move(*record), static_cast<uint32_t>(reply::num(e[2])), *token,
                                 static_cast<proto::StartCheck>(check)});
  }
  return out;
}

}  // namespace calls

std::vector<FreeSlots> Dispatcher::open_slots(const std::string& queue) const {
  return workers_.free_slots(queue, config_.max_unread_bytes(), [&](const std::string& w) {
    return static_cast<int64_t>(inflight_.count_for_worker(w)) + reserved_.of(w);
  });
}

int64_t Dispatcher::credit(const std::string& queue) const {
  int64_t total = 0;
  for (const auto& slots : open_slots(queue)) total += slots.free;
  return total;
}

bool Dispatcher::earlier_queue_waits(const WorkerInfo& w, const std::string& queue) const {
  if (!w.strict) return false;
  for (const auto& name : w.queues) {
    if (name == queue) return false;
    const QueueState* q = queues_.find(name);
    if (q != nullptr && (q->maybe_ready || q->ready_this_round) && !q->paused) return true;
  }
  return false;
}

Dispatcher::Allotment Dispatcher::allot(const std::vector<std::string>& leasing, const std::vector<int64_t>& rooms) {
  std::map<std::string, int64_t> free;  // worker -> free slots
  for (const auto& name : leasing)
    for (const auto& s : open_slots(name)) free[s.worker] = std::max(free[s.worker], s.free);
  std::map<std::string, SlotAllotter::Call> calls;
  for (size_t i = 0; i < leasing.size(); ++i) calls[leasing[i]] = {rooms[i], rooms[i] < config_.lease_batch};
  std::vector<SlotAllotter::Worker> with_room;
  for (const auto& [id, count] : free)
    if (const WorkerInfo* w = workers_.find(id); w != nullptr)
      with_room.push_back({id, count, &w->queues, &w->weights, w->strict});
  Allotment out = allotter_.allot(with_room, calls);
  // Counters of workers gone go with them.
  allotter_.forget([&](const std::string& id) { return workers_.find(id) == nullptr; });
  return out;
}

Dispatcher::Slots Dispatcher::take_slots(const std::string& queue, int64_t wanted, const Allotment* allotment) {
  Slots taken;
  const std::map<std::string, int64_t>* allotted = nullptr;
  if (allotment != nullptr) {
    auto it = allotment->find(queue);
    if (it == allotment->end()) return taken;
    allotted = &it->second;
  }
  for (const auto& s : open_slots(queue)) {
    if (taken.count == wanted) break;
    int64_t may = s.free;
    if (allotted != nullptr) {
      auto it = allotted->find(s.worker);
      may = it == allotted->end() ? 0 : std::min(may, it->second);
    } else if (const WorkerInfo* w = workers_.find(s.worker); w != nullptr && earlier_queue_waits(*w, queue)) {
      may = 0;
    }
    if (may <= 0) continue;
    const int64_t n = std::min(may, wanted - taken.count);
    reserved_.add(s.worker, n);
    taken.per_worker.emplace_back(s.worker, n);
    taken.count += n;
  }
  return taken;
}

void Dispatcher::release(const Slots& slots) {
  for (const auto& [worker, n] : slots.per_worker) reserved_.remove(worker, n);
}

int64_t Dispatcher::lease_room(const QueueState& q) const {
  if (q.paused || lease_clock_.now_ms() < q.lease_after_ms) return 0;
  int64_t room = config_.lease_batch;
  if (const int64_t limit = config_.policy(q.name).concurrency_limit; limit > 0)
    room = std::min(room, limit - inflight_.count_for_queue(q.name) - reserved_by_queue_.of(q.name));
  return std::max<int64_t>(0, room);
}

bool Dispatcher::can_lease_now() const {
  if (refusals_.holding()) return false;
  for (const std::string& name : workers_.served_queues())
    if (const QueueState* q = queues_.find(name);
        q != nullptr && q->may_have_ready(lease_clock_.now_ms()) && lease_room(*q) > 0 && credit(name) > 0 &&
        !refusals_.holding(name))
      return true;
  return false;
}

int64_t Dispatcher::us_until_limit_lifts() const {
  const int64_t now = lease_clock_.now_ms();
  int64_t earliest = -1;
  for (const auto& [name, q] : queues_) {
    if (q.maybe_ready && !q.paused && q.lease_after_ms > now) earliest = earliest_known(earliest, q.lease_after_ms);
    if (!q.paused && q.key_wake_ms > now) earliest = earliest_known(earliest, q.key_wake_ms);
  }
  return earliest < 0 ? -1 : (earliest - now) * 1000;
}

Dispatcher::Reservation Dispatcher::reserve(const std::string& queue, int64_t wanted, bool stopping) {
  Reservation r;
  if (stopping) return r;
  r.slots = take_slots(queue, std::max<int64_t>(0, std::min<int64_t>(wanted, config_.lease_batch)));
  if (r.slots.count == 0) return r;
  r.deadline_ms = lease_clock_.now_ms() + config_.delivery_timeout_ms;
  r.tokens = random_tokens(static_cast<size_t>(r.slots.count));
  return r;
}

void Dispatcher::deliver(const std::string& queue, const Reservation& reservation, std::vector<LeasedJob>&& jobs) {
  if (reservation.slots.count == 0) return;
  release(reservation.slots);
  if (jobs.empty()) return;
  QueueState& q = queues_.get(queue);
  q.next_deadline_ms = earliest_known(q.next_deadline_ms, reservation.deadline_ms);
  dispatch(q, std::move(jobs), reservation.deadline_ms);
}

void Dispatcher::add_to(Round& round, bool stopping) {
  if (refusals_.holding()) return;
  const int64_t deadline = lease_clock_.now_ms() + config_.delivery_timeout_ms;
  std::vector<std::string> leasing;  // the queues a lease call may go to now, with their room
  std::vector<int64_t> rooms;
  // A queue no worker serves keeps its hints until one does.
  for (const std::string& name : workers_.served_queues()) {
    QueueState* found = queues_.find(name);
    if (found == nullptr) continue;
    QueueState& q = *found;
    if (q.key_wake_ms > 0 && q.key_wake_ms <= lease_clock_.now_ms()) {
      q.maybe_ready = true;
      q.key_wake_ms = 0;
    }
    const bool maybe_ready = q.maybe_ready || q.ready_this_round;
    q.ready_this_round = false;
    if (!maybe_ready || stopping) continue;
    if (refusals_.holding(name)) {
      q.ready_this_round = maybe_ready;  // asked again once its slot has moved
      continue;
    }
    q.maybe_ready = true;  // asked again, when no worker has room now, once one has
    const int64_t room = lease_room(q);
    if (room == 0) continue;  // held back by a pause or a limit: asked again once it lifts
    leasing.push_back(name);
    rooms.push_back(room);
  }
  // A worker serving several of these queues has its free slots shared
  // among them by its weights, or given to the first in its order.
  const Allotment allotment = allot(leasing, rooms);
  for (size_t i = 0; i < leasing.size(); ++i) {
    const std::string& name = leasing[i];
    Slots slots = take_slots(name, rooms[i], &allotment);
    if (slots.count == 0) continue;
    const int count = static_cast<int>(slots.count);
    reserved_by_queue_.add(name, count);
    const LeaseLimits limits = LeaseLimits::of(config_.policy(name), lease_clock_.now_ms());
    round.add(calls::lease(name, deadline, count, limits),
              [this, name, count, deadline, slots = std::move(slots)](const redisReply* r) {
                on_leased(name, count, deadline, slots, r);
              });
  }
}

void Dispatcher::on_leased(const std::string& name, int count, int64_t deadline, const Slots& slots,
                           const redisReply* r) {
  release(slots);
  reserved_by_queue_.remove(name, count);
  if (r == nullptr) return;  // nothing leased that the broker knows of; reclaim returns it if it was
  QueueState& q = queues_.get(name);
  auto batch = calls::parse_lease(r);
  if (!batch) return refusals_.refused(name, fmt::format("lease on '{}'", name), batch.error().message);
  refusals_.succeeded();
  note_hold(q, *batch, count);
  for (auto& item : batch->unreadable) {
    spdlog::error("queue '{}': job {}: {}; it goes to the dead letters", name, loggable(item.id), item.reason);
    results_.requeue(name, std::move(item));
  }
  expire_late(name, batch->jobs);
  if (batch->jobs.empty()) return;
  q.next_deadline_ms = earliest_known(q.next_deadline_ms, deadline);
  // The next round is already in Redis (or there is none): sending now
  // overlaps Redis's work.
  dispatch(q, std::move(batch->jobs), deadline);
}

// Jobs leased past their start-by deadline are not sent: they go dead
// unstarted, "expired" (no attempt used), and the queue counts them.
void Dispatcher::expire_late(const std::string& name, std::vector<LeasedJob>& jobs) {
  const int64_t now = lease_clock_.now_ms();
  std::erase_if(jobs, [&](LeasedJob& job) {
    if (job.record.start_by_ms == 0 || now <= job.record.start_by_ms) return false;
    results_.requeue(name, NackItem{job.id, job.token, NackMode::expired, expired_reason(job.record.start_by_ms), 0});
    return true;
  });
}

void Dispatcher::note_hold(QueueState& q, const LeaseBatch& batch, int count) {
  const size_t taken = batch.jobs.size() + batch.unreadable.size();
  // Jobs parked for their key's rate run when its next token comes: no
  // ack or enqueue need happen first.
  q.key_wake_ms = batch.key_wake_ms > 0 ? lease_clock_.now_ms() + std::min<int64_t>(batch.key_wake_ms, 60'000) : 0;
  // Held back, the ready set may hold more: asked again once the hold lifts.
  q.maybe_ready = true;
  switch (batch.held_by) {
    case LeaseHold::none: q.maybe_ready = static_cast<int>(taken) == count; break;
    case LeaseHold::paused:
      // Paused in Redis, which this broker had not heard of (it took
      // over, or restarted): nothing more until `dueq resume`.
      if (!q.paused) spdlog::info("queue '{}' is paused: it dispatches nothing until resumed", q.name);
      q.paused = true;
      break;
    case LeaseHold::concurrency:
      // Leases this broker does not know of (a former leader's) fill the
      // limit: asked again a little later rather than every turn.
      if (taken == 0) q.lease_after_ms = lease_clock_.now_ms() + kLimitRecheckMs;
      break;
    case LeaseHold::rate: q.lease_after_ms = lease_clock_.now_ms() + std::clamp<int64_t>(batch.wait_ms, 1, 60'000); break;
    case LeaseHold::keys:
      // Parked jobs wait for a turn their key's running jobs release: an
      // ack or nack of this queue asks again (Results).
      q.keys_parked = true;
      q.maybe_ready = batch.wait_ms == 1 || static_cast<int>(taken) == count;
      break;
  }
}

void Dispatcher::send_frame(QueueState& q, const FreeSlots& slot, proto::Tasks& frame, size_t bytes, int64_t now_ms) {
  if (frame.items.empty()) return;
  const std::string& worker = slot.worker;
  WorkerInfo* w = workers_.find(worker);
  // What a worker has not confirmed reading stays under max_unread_mib:
  // the broker queues no more for a peer that stops reading its socket
  // (and declares it lost: Workers::expire_silent).
  const auto unread = static_cast<int64_t>(bytes);
  const bool room = w == nullptr || w->may_send_unread(unread, config_.max_unread_bytes());
  if (room && outbox_.send(Peer{worker, false}, frame)) {
    if (w != nullptr) w->note_sent(frame.seq, unread, now_ms);
    QueueMetrics& measured = metrics_.queue(q.name);
    for (const auto& task : frame.items) Metrics::sent(measured, now_ms, task.due_ms, task.created_ms, task.attempt);
  } else {
    // Never reached the worker: back to ready without using an attempt.
    if (w != nullptr && room) w->unreachable = true;
    if (auto held_back = unreachable_log_.admit(worker, lease_clock_.now_ms()))
      spdlog::warn("worker {} cannot take a TASKS frame (disconnected or not reading); {} jobs handed back{}",
                   loggable(worker), frame.items.size(),
                   *held_back > 0 ? fmt::format(" ({} earlier lines held back)", *held_back) : "");
    for (auto& task : frame.items) {
      inflight_.remove(task.queue, task.id, task.token);
      results_.requeue(q.name, NackItem{std::move(task.id), task.token, NackMode::handed_back,
                                        "not delivered: the worker could not take it", 0, worker});
    }
  }
  frame.items.clear();
}

// Each job goes where BatchPlacer says (broker/loop/batch_placer.hpp), into that
// worker's TASKS frame; a frame goes out once full and at the end.
void Dispatcher::dispatch(QueueState& q, std::vector<LeasedJob>&& jobs, int64_t deadline) {
  const auto slots = open_slots(q.name);
  const int64_t now_ms = lease_clock_.now_ms();
  std::vector<BatchPlacer::Slot> room;
  room.reserve(slots.size());
  for (const auto& s : slots) room.push_back({s.free, s.capacity});
  BatchPlacer placer(room, q.rotation++);
  std::vector<proto::Tasks> frames(slots.size());
  std::vector<size_t> frame_bytes(slots.size(), 0);
  for (auto& job : jobs) {
    const std::optional<size_t> found = placer.next();
    if (!found) {
      // Its worker went away (or stopped taking jobs) while the lease
      // call was out: back at once, without charging an attempt.
      results_.requeue(q.name, NackItem{job.id, job.token, NackMode::handed_back, "no free worker", 0});
      continue;
    }
    const size_t slot = *found;
    proto::Tasks& frame = frames[slot];
    if (frame.items.empty()) {
      frame.seq = ++tasks_frames_sent_;
      frame_bytes[slot] = 0;
    }
    auto& r = job.record;
    inflight_.add(InflightJob{q.name, job.id, job.token, slots[slot].worker, deadline, false, false, frame.seq,
                              deadline - config_.delivery_timeout_ms, false,
                              job.start_check == proto::StartCheck::announce_alone, r.type});
    frame_bytes[slot] += r.payload.size() + job.id.size() + r.type.size() + r.key.size() + r.traceparent.size() +
                         r.tracestate.size();
    frame.items.push_back(proto::Task{q.name, std::move(job.id), std::move(r.type), proto::Bytes{std::move(r.payload)},
                                      r.due_ms, job.attempt, r.max_attempts, job.token, r.created_ms,
                                      r.payload_checksum, job.start_check, proto::Bytes{std::move(r.key)},
                                      r.start_by_ms, std::move(r.traceparent), std::move(r.tracestate)});
    if (frame.items.size() == proto::kMaxBatch || frame_bytes[slot] >= proto::kMaxTasksFrameBytes)
      send_frame(q, slots[slot], frame, frame_bytes[slot], now_ms);
  }
  for (size_t slot = 0; slot < frames.size(); ++slot) send_frame(q, slots[slot], frames[slot], frame_bytes[slot], now_ms);
}

}  // namespace dueq::broker
