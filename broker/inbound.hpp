#pragma once
// Inbound: everything that arrives on the ROUTER socket. Reads frames,
// decodes them, validates every field a handler relies on (each enqueued job
// included) and routes each to the component that owns it. No business logic
// lives here; a malformed frame is answered with an ERROR frame, counted, and
// logged at most once per peer per 10 s.
#include <zmq.hpp>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "broker/loop/waits.hpp"
#include "broker/loop/access.hpp"
#include "broker/admin/admin.hpp"
#include "broker/loop/outbox.hpp"
#include "broker/loop/enqueuer.hpp"
#include "broker/loop/group_enqueuer.hpp"
#include "broker/loop/queue_remover.hpp"
#include "broker/loop/stats_requests.hpp"
#include "broker/loop/workers.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

// Checks one enqueued job; the error says which field is wrong.
Result<void> validate_new_job(const proto::NewJob& job, int64_t now_ms);
// The unique fields of a job (docs/keys.md): all or none, a key of 1..128
// bytes, a period only with until period.
Result<void> validate_unique(const proto::NewJob& job);

class Inbound {
 public:
  Inbound(zmq::socket_t& router, const Clock& clock, Outbox& outbox, Access& access, Workers& workers,
          Enqueuer& enqueuer, GroupEnqueuer& group_enqueuer, StatsRequests& stats, Admin& admin, QueueRemover& remover,
          Waits& waits)
      : router_(router), clock_(clock), outbox_(outbox), access_(access), workers_(workers), enqueuer_(enqueuer),
        group_enqueuer_(group_enqueuer), stats_(stats), admin_(admin), remover_(remover), waits_(waits) {}

  // Reads and routes up to `max_frames` frames without blocking, with
  // `connections` peers connected. Returns true when it stopped because the
  // socket was empty.
  bool receive(int max_frames, uint64_t connections);
  static constexpr size_t kMaxBytesPerTurn = 8u << 20;
  // Frames the broker's socket queues per peer (ZMQ_RCVHWM); a faster peer
  // is held back by TCP.
  static constexpr int kQueuedFramesPerPeer = 100;
  // Steady time before which every frame that had reached the socket has
  // been handled: when it was last read empty, or, under a flood that never
  // lets it go empty, the last moment since which enough frames were read
  // to drain every peer's queue (see receive()).
  int64_t all_read_before_ms() const { return all_read_before_ms_; }

  // Standing by (broker/loop/leadership.hpp): every frame is answered
  // "not_leader", naming `leader` when known; nothing is routed.
  // `leader`: the endpoint the lease holder advertised; when it is this
  // broker's own (`self`), the holder is this broker's earlier run, killed
  // or restarted, whose lease has not lapsed yet.
  void stand_by(const std::string& leader, const std::string& self, int64_t lease_ms) {
    if (!leader.empty() && leader == self)
      standby_answer_ = "this broker restarted; it leads once the lease of its earlier run lapses (within " +
                        std::to_string(lease_ms) + " ms)";
    else
      standby_answer_ = "this broker stands by; " +
                        (leader.empty() ? std::string("another broker leads") : "the leader is at " + leader);
  }
  void lead() { standby_answer_.reset(); }

 private:
  // `grant`: the sender's key's, with CURVE on (nullptr without).
  // One message off the socket, all its parts; false when none is queued.
  bool read_message(std::vector<zmq::message_t>& parts);
  // Checks, decodes and routes one message; answers the sender when it is
  // refused. Returns the body's size (0 for a malformed envelope).
  size_t take(std::vector<zmq::message_t>& parts, int64_t heard_ms);
  void route(const Peer& peer, const Grant* grant, proto::Frame&& frame, int64_t heard_ms);
  // The grant of the key `body` came with: nullptr without CURVE; nullopt
  // (answered and counted) when the key is no longer on the allow-list.
  std::optional<const Grant*> sender_grant(Peer& peer, zmq::message_t& body, int64_t heard_ms);
  // With CURVE on: why `grant` may not send `frame` ("" when it may); caps
  // the capacity a worker announces at its key's.
  std::string refusal(const Peer& peer, const Grant& grant, proto::Frame& frame) const;
  void on_group_enqueue(const Peer& peer, proto::GroupEnqueue&& request, const Grant* grant);
  void on_enqueue(const Peer& peer, proto::Enqueue&& enqueue, const Grant* grant);
  // Answers ERROR naming `request_id` (0: none could be read).
  void reject(const Peer& peer, const Error& error, int64_t heard_ms, uint64_t request_id = 0);

  zmq::socket_t& router_;
  const Clock& clock_;
  Outbox& outbox_;
  Access& access_;
  Workers& workers_;
  Enqueuer& enqueuer_;
  GroupEnqueuer& group_enqueuer_;
  StatsRequests& stats_;
  Admin& admin_;
  QueueRemover& remover_;
  Waits& waits_;
  // Moments of a flood (socket not read empty since), with frames_read_ at
  // each; at most one per kMarkSpacingMs and kMaxMarks in all.
  struct ReadMark {
    int64_t at_ms;
    uint64_t frames_read;
  };
  static constexpr int64_t kMarkSpacingMs = 10;
  static constexpr size_t kMaxMarks = 4'096;
  std::deque<ReadMark> marks_;
  uint64_t frames_read_ = 0;
  std::optional<std::string> standby_answer_;
  int64_t all_read_before_ms_ = 0;
  // One line per peer per 10 s about its rejected frames, 20 a second in all.
  LogLimiter reject_log_{10'000, 20, 10'000};
  uint64_t frames_rejected_ = 0;
};

}  // namespace dueq::broker
