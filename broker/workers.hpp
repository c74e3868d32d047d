#pragma once
// Worker liveness: HELLO registers a worker (and adopts the deliveries it
// still holds after a reconnect), HEARTBEAT keeps it alive and lists what it
// holds (leases running short are extended), BYE hands back what it has not
// started. A worker silent for worker_timeout is dead: its deliveries go
// back to ready at once. Silence is measured on the steady clock and only up
// to the moment the socket was last read empty, so neither a wall clock
// step nor a slow turn of the loop (frames still unread) kills a live worker.
#include <string>
#include <vector>

#include "broker/config.hpp"
#include "broker/inflight.hpp"
#include "broker/outbox.hpp"
#include "broker/queues.hpp"
#include "broker/registry.hpp"
#include "broker/results.hpp"
#include "common/clock.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

class Workers {
 public:
  Workers(const BrokerConfig& config, const LeaseClock& lease_clock, std::string broker_id, QueueTable& queues,
          InflightTable& inflight, Results& results, Outbox& outbox)
      : config_(config), lease_clock_(lease_clock), broker_id_(std::move(broker_id)), queues_(queues),
        inflight_(inflight), results_(results), outbox_(outbox) {}

  void on_hello(const Peer& peer, proto::Hello&& hello, int64_t heard_ms);
  void on_heartbeat(const Peer& peer, const proto::Heartbeat& heartbeat, int64_t heard_ms);
  void on_bye(const Peer& peer, const proto::Bye& bye, int64_t heard_ms);
  // Any other frame from a worker also shows it is alive.
  void heard_from(const std::string& routing_id, int64_t heard_ms);

  // Declares dead the workers silent for worker_timeout as of `read_empty_ms`,
  // the steady time at which every frame sent before it had been read.
  void expire_silent(int64_t read_empty_ms);
  // Steady time at which the quietest worker would be declared dead; -1 none.
  int64_t next_expiry_ms() const;

  WorkerRegistry& registry() { return registry_; }

 private:
  void adopt_held(const std::string& routing_id, const std::vector<proto::JobRef>& held);
  void forget(const std::string& routing_id, const char* reason);

  const BrokerConfig& config_;
  const LeaseClock& lease_clock_;
  std::string broker_id_;
  QueueTable& queues_;
  InflightTable& inflight_;
  Results& results_;
  Outbox& outbox_;
  WorkerRegistry registry_;
};

}  // namespace dueq::broker
