#pragma once
// Inbound: everything that arrives on the ROUTER socket. Reads frames,
// decodes them, validates every field a handler relies on (each enqueued job
// included) and routes each to the component that owns it. No business logic
// lives here; a malformed frame is answered with an ERROR frame, counted, and
// logged at most once per peer per 10 s.
#include <zmq.hpp>

#include <cstdint>
#include <string>

#include "broker/admin.hpp"
#include "broker/outbox.hpp"
#include "broker/producer_gateway.hpp"
#include "broker/results.hpp"
#include "broker/workers.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

// Checks one enqueued job; the error says which field is wrong.
Result<void> validate_new_job(const proto::NewJob& job, int64_t now_ms);

class Inbound {
 public:
  Inbound(zmq::socket_t& router, const Clock& clock, Outbox& outbox, Workers& workers, Results& results,
          ProducerGateway& gateway, Admin& admin)
      : router_(router), clock_(clock), outbox_(outbox), workers_(workers), results_(results), gateway_(gateway),
        admin_(admin) {}

  // Reads and routes up to `max_frames` frames without blocking. Returns
  // true when it stopped because the socket was empty.
  bool receive(int max_frames);
  static constexpr size_t kMaxBytesPerTurn = 8u << 20;
  // Steady time at which the socket was last read empty: every frame sent
  // before it has been handled.
  int64_t read_empty_ms() const { return read_empty_ms_; }

 private:
  void route(const Peer& peer, proto::Frame&& frame, int64_t heard_ms);
  void on_enqueue(const Peer& peer, proto::Enqueue&& enqueue);
  void reject(const Peer& peer, const Error& error, int64_t heard_ms);

  zmq::socket_t& router_;
  const Clock& clock_;
  Outbox& outbox_;
  Workers& workers_;
  Results& results_;
  ProducerGateway& gateway_;
  Admin& admin_;
  int64_t read_empty_ms_ = 0;
  // One line per peer per 10 s about its rejected frames, 20 a second in all.
  LogLimiter reject_log_{10'000, 20, 10'000};
  uint64_t frames_rejected_ = 0;
};

}  // namespace dueq::broker
