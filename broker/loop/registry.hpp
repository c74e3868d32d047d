#pragma once
// Who is connected and what they can take: workers by ZeroMQ routing id, the
// queues each serves, their capacity, and when each was last heard from.
//
// Two components write it, each its own fields: Workers (broker/loop/workers.cpp)
// adds and removes workers and keeps what they said (HELLO, heartbeats,
// receipts, bars); the Dispatcher keeps the send side, since it is what
// sends TASKS: the frames sent, the bytes not yet confirmed read, whether
// the socket refused one. Everyone else reads.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "broker/loop/inflight.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

struct WorkerInfo {
  std::string worker_id;
  std::string host;  // as its HELLO said (shown by `dueq workers`, never trusted)
  uint32_t pid = 0;
  std::string key_name;  // the allow-list name of the key it said HELLO with ("" without CURVE)
  // The key's `capacity` when it said HELLO: what all workers of the key hold
  // together stays under it, however many connections the key opens (0 = none).
  uint32_t key_capacity = 0;
  std::vector<std::string> queues;
  std::vector<uint32_t> weights;  // one per queue (HELLO; all 1 when it gave none)
  bool strict = false;            // its free slots go to the first of its queues with jobs
  uint32_t capacity = 0;
  bool draining = false;
  int64_t last_seen_ms = 0;
  // Given a stall's grace (count_as_heard) and not heard from since: the
  // next stall gives it none, so a broker that stalls again and again still
  // declares a silent worker dead.
  bool excused = false;
  // A TASKS frame could not be queued for it (disconnected, or not reading):
  // sent nothing more until it is heard from again.
  bool unreachable = false;
  // The last TASKS frames it said it received (RECEIVED), oldest first. A
  // frame can be lost on a reconnect while later ones arrive, so each is
  // remembered, not only the highest; older ones than these have been listed
  // in heartbeats since.
  std::deque<uint64_t> received_frames{};
  // It has shown it takes deliveries: said RECEIVED, or listed jobs it
  // holds in a HELLO (after a reconnect or a broker change).
  bool confirmed = false;
  // It has heartbeated since its HELLO: it stays, whether or not it has
  // been sent anything yet.
  bool heartbeated = false;
  // A newcomer: neither of the above yet (what a hit-and-run peer stays).
  bool newcomer() const { return !confirmed && !heartbeated; }
  // The unconfirmed TASKS frame it was last told it never said RECEIVED for.
  uint64_t missing_received_seq = 0;
  // TASKS frames sent and not yet confirmed by RECEIVED, oldest first, and
  // their bytes: what sits unread in its connection at most.
  struct UnreadFrame {
    uint64_t seq = 0;
    int64_t bytes = 0;
    int64_t sent_ms = 0;  // lease clock
  };
  std::deque<UnreadFrame> unread_frames{};
  int64_t unread_bytes = 0;

  static constexpr size_t kReceivedFramesKept = 1024;
  void note_sent(uint64_t seq, int64_t bytes, int64_t sent_ms) {
    unread_frames.push_back({seq, bytes, sent_ms});
    unread_bytes += bytes;
  }
  // Room for one more TASKS frame of up to `frame_bytes` without passing
  // `max_unread_bytes` (a first frame always goes).
  bool may_send_unread(int64_t frame_bytes, int64_t max_unread_bytes) const {
    return unread_bytes == 0 || unread_bytes + frame_bytes <= max_unread_bytes;
  }
  void note_received(uint64_t seq) {
    // A frame lost on a reconnect is never confirmed: the RECEIVED of a
    // later one shows it is not unread either.
    while (!unread_frames.empty() && unread_frames.front().seq <= seq) {
      unread_bytes -= unread_frames.front().bytes;
      unread_frames.pop_front();
    }
    // Frames reach a worker in the order sent; a repeat or an older seq adds nothing.
    if (!received_frames.empty() && seq <= received_frames.back()) return;
    received_frames.push_back(seq);
    if (received_frames.size() > kReceivedFramesKept) received_frames.pop_front();
  }
  bool received(uint64_t seq) const { return std::binary_search(received_frames.begin(), received_frames.end(), seq); }
  // This worker confirmed receiving `job`: listed it as held, or said
  // RECEIVED for its TASKS frame.
  bool confirmed_receipt(const InflightJob& job) const { return job.reported || received(job.frame_seq); }
};

// A worker that can take more jobs of a queue: `free` more, of the
// `capacity` it may hold.
struct FreeSlots {
  std::string worker;
  int64_t free = 0;
  int64_t capacity = 0;
};

class WorkerRegistry {
 public:
  static constexpr int64_t kUnconfirmedCredit = 16;
  // What all newcomers (WorkerInfo::newcomer) together may hold: hit-and-run
  // peers, each taking kUnconfirmedCredit jobs and vanishing, would
  // otherwise hold a whole backlog away from the healthy workers until the
  // delivery deadline, again and again while they keep coming. A real
  // worker leaves the pool at its first heartbeat, or once it confirms a
  // frame (a round trip).
  static constexpr int64_t kNewcomerPool = 64;
  void upsert(const std::string& routing_id, WorkerInfo info) { workers_[routing_id] = std::move(info); }
  WorkerInfo* find(const std::string& routing_id) {
    auto it = workers_.find(routing_id);
    return it == workers_.end() ? nullptr : &it->second;
  }
  void remove(const std::string& routing_id) { workers_.erase(routing_id); }

  // Newcomers (WorkerInfo::newcomer) kept at once: each is scanned whenever
  // slots are counted, so a stream of HELLOs from fresh routing ids that
  // never heartbeat would otherwise grow the registry, and the cost of every
  // dispatch with it, for worker_timeout.
  static constexpr size_t kMaxNewcomers = 1'024;
  // `routing_id` has just registered as a newcomer. Returns the newcomer
  // registered longest ago when this one is past kMaxNewcomers: the caller
  // forgets it.
  std::optional<std::string> admit_newcomer(const std::string& routing_id) {
    newcomers_.push_back(routing_id);
    if (newcomers_.size() <= kMaxNewcomers) return std::nullopt;
    // Entries of workers gone or grown out of it are dropped lazily.
    std::erase_if(newcomers_, [&](const std::string& rid) {
      const WorkerInfo* w = find(rid);
      return w == nullptr || !w->newcomer();
    });
    if (newcomers_.size() <= kMaxNewcomers) return std::nullopt;
    std::string oldest = std::move(newcomers_.front());
    newcomers_.pop_front();
    return oldest;
  }

  // Under a barred routing id a delivery ran out (worker lost, or the
  // delivery deadline passed) before the worker confirmed it: while it has
  // confirmed nothing, it is sent nothing until it heartbeats (a peer that
  // only says HELLO, again and again, takes no more jobs away). Kept apart
  // from the workers, so a HELLO after the worker's removal starts barred;
  // forgotten all at once past kBarredKept ids.
  static constexpr size_t kBarredKept = 10'000;
  void bar(const std::string& routing_id) {
    if (barred_.size() >= kBarredKept) barred_.clear();
    barred_.insert(routing_id);
  }
  void lift_bar(const std::string& routing_id) { barred_.erase(routing_id); }

  // Routing ids of workers that have stopped reading their socket: their
  // unread TASKS leave no room for another frame, and the oldest has waited
  // since before `cutoff_ms` (lease clock).
  std::vector<std::string> stopped_reading(int64_t max_unread_bytes, int64_t cutoff_ms) const {
    std::vector<std::string> out;
    for (const auto& [rid, w] : workers_)
      if (!w.may_send_unread(proto::kMaxTasksFrameBytes, max_unread_bytes) && w.unread_frames.front().sent_ms < cutoff_ms)
        out.push_back(rid);
    return out;
  }

  // The broker itself did not run for a while: every worker counts as heard
  // from at `heard_ms` (a later time is the grace given to one that gave the
  // silent broker up to come back), unless heard from later, once until it
  // is heard from again.
  void count_as_heard(int64_t heard_ms) {
    for (auto& [rid, w] : workers_) {
      if (w.excused) continue;
      w.excused = true;
      w.last_seen_ms = std::max(w.last_seen_ms, heard_ms);
    }
  }

  // Every worker by routing id, in routing id order: for `dueq workers`.
  template <typename Visit>
  void for_each(Visit visit) const {
    for (const auto& [rid, w] : workers_) visit(rid, w);
  }

  // Routing ids of workers not heard from since `cutoff_ms`.
  std::vector<std::string> silent_since(int64_t cutoff_ms) const {
    std::vector<std::string> out;
    for (const auto& [rid, w] : workers_)
      if (w.last_seen_ms < cutoff_ms) out.push_back(rid);
    return out;
  }

  // Every queue some worker serves, each once, in name order. A store may
  // hold many more queues than its workers serve (20,000 of which one has a
  // worker): the dispatch looks at these, not at every queue known.
  std::vector<std::string> served_queues() const {
    std::vector<std::string> out;
    for (const auto& [rid, w] : workers_) out.insert(out.end(), w.queues.begin(), w.queues.end());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // Earliest last_seen among workers, to know when the next one can expire.
  int64_t oldest_seen_ms() const {
    int64_t oldest = INT64_MAX;
    for (const auto& [rid, w] : workers_) oldest = std::min(oldest, w.last_seen_ms);
    return oldest;
  }

  // Live, non-draining workers serving `queue` with room for another full
  // TASKS frame within `max_unread_bytes`, each with how many more jobs it
  // can take (`held` counts what it holds now, or has been promised). A key
  // with a capacity shares it among all of its workers: what they hold
  // together is counted first, and the room left is handed out in turn.
  // Newcomers take jobs only of a queue no established worker takes, and
  // only from kNewcomerPool: a stream of peers that say HELLO and vanish
  // takes nothing from a queue that has a worker, and a real worker waits
  // at most one heartbeat for its first jobs.
  template <typename HeldFn>
  std::vector<FreeSlots> free_slots(const std::string& queue, int64_t max_unread_bytes, HeldFn held) const {
    bool established = false;
    for (const auto& [rid, w] : workers_)
      if (!w.newcomer() && may_take(rid, w, queue, max_unread_bytes)) {
        established = true;
        break;
      }
    std::unordered_map<std::string, int64_t> key_room;
    int64_t pool_room = kNewcomerPool;
    for (const auto& [rid, w] : workers_) {
      if (w.key_capacity > 0) key_room.try_emplace(w.key_name, w.key_capacity).first->second -= held(rid);
      if (w.newcomer() && !established) pool_room -= held(rid);
    }
    std::vector<FreeSlots> out;
    for (const auto& [rid, w] : workers_) {
      if ((w.newcomer() && (established || pool_room <= 0)) || !may_take(rid, w, queue, max_unread_bytes)) continue;
      // Until it confirms a TASKS frame (RECEIVED), a worker is sent at most
      // kUnconfirmedCredit jobs: a peer that says HELLO with a large capacity
      // and falls silent takes that few away per HELLO, not its capacity.
      const int64_t capacity = w.confirmed ? w.capacity : std::min<int64_t>(w.capacity, kUnconfirmedCredit);
      int64_t free = capacity - held(rid);
      if (w.key_capacity > 0) free = std::min(free, key_room[w.key_name]);
      if (w.newcomer()) free = std::min(free, pool_room);
      if (free <= 0) continue;
      if (w.key_capacity > 0) key_room[w.key_name] -= free;
      if (w.newcomer()) pool_room -= free;
      out.push_back({rid, free, capacity});
    }
    return out;
  }

  size_t size() const { return workers_.size(); }
  // Every registered worker, by routing id.
  const std::unordered_map<std::string, WorkerInfo>& all() const { return workers_; }
  bool serves(const std::string& queue) const {
    for (const auto& [rid, w] : workers_)
      if (std::find(w.queues.begin(), w.queues.end(), queue) != w.queues.end()) return true;
    return false;
  }

 private:
  // `w` serves `queue` and may be sent a TASKS frame now.
  bool may_take(const std::string& rid, const WorkerInfo& w, const std::string& queue, int64_t max_unread_bytes) const {
    return !w.draining && !w.unreachable && w.may_send_unread(proto::kMaxTasksFrameBytes, max_unread_bytes) &&
           (w.confirmed || !barred_.contains(rid)) && std::find(w.queues.begin(), w.queues.end(), queue) != w.queues.end();
  }

  std::unordered_map<std::string, WorkerInfo> workers_;
  std::unordered_set<std::string> barred_;
  std::deque<std::string> newcomers_;  // routing ids, in order of registration (some may have left)
};

}  // namespace dueq::broker
