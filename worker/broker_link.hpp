#pragma once
// The worker's registration with a broker: the DEALER socket's endpoint in
// use among several, whether a WELCOME registered this worker (and what it
// said), when to say HELLO again, when to leave a broker for the next
// endpoint (it stands by, the connection dropped, it fell silent, no
// WELCOME came), and telling the user why the worker is not registered. The
// worker loop (worker/worker.cpp) owns the jobs; this owns the link.
#include <cstdint>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "common/broker_endpoints.hpp"
#include "common/error.hpp"
#include "common/link_events.hpp"
#include "common/protocol.hpp"

namespace dueq::worker {

class BrokerLink {
 public:
  static constexpr int64_t kHelloRetryMs = 1'000;
  static constexpr int64_t kDefaultHeartbeatMs = 500;

  BrokerLink(zmq::context_t& context, zmq::socket_t& dealer) : context_(context), dealer_(dealer) {}

  // Sets the socket up (routing id, reconnects, CURVE keys) and connects
  // to the first of `brokers` (comma-separated endpoints).
  Result<void> open(const std::string& worker_id, const std::string& brokers, const std::string& broker_key,
                    const std::string& key_file, int64_t now_ms);

  // The socket of connection events, for the worker's poll.
  void* events_handle() { return link_->handle(); }
  const std::string& endpoint() const { return endpoints_->current(); }
  bool welcomed() const { return welcomed_; }
  int64_t heartbeat_ms() const { return heartbeat_ms_; }

  // A frame came from the broker.
  void heard(int64_t now_ms) { last_heard_ms_ = now_ms; }
  void hello_sent(int64_t now_ms) { hello_sent_ms_ = now_ms; }
  // Registered by this WELCOME; true when it is news (first, another
  // broker, or after being unregistered), which the worker logs.
  bool on_welcome(const proto::Welcome& welcome);
  // The broker answered unknown_worker (restarted, or declared this one lost).
  void on_unknown_worker(int64_t now_ms) { set_unregistered(now_ms); }
  // The broker refused this worker's key or role before it was registered.
  void on_refused(int64_t now_ms, const std::string& message);
  // The broker stands by: on to the next endpoint.
  void on_not_leader() { switch_broker("it stands by"); }
  bool several_endpoints() const { return endpoints_->several(); }
  // Reads the connection events (when `events_ready`), checks silence,
  // and reports a registration that does not come.
  void on_turn(int64_t now_ms, bool events_ready);
  // No WELCOME for kHelloRetryMs since the last HELLO: true when HELLO is
  // to be sent again here (with several endpoints the next one is tried).
  bool hello_unanswered(int64_t now_ms);
  // Moves to the next endpoint when a reason to leave came and its time is
  // due; true when it moved (the worker then says HELLO there).
  bool switch_if_due(int64_t now_ms);
  // Milliseconds until switch_if_due may act; -1: nothing to do.
  int64_t ms_until_switch(int64_t now_ms) const;

 private:
  void switch_broker(const char* why);
  void set_unregistered(int64_t now_ms);
  void report_unregistered(int64_t now_ms, const std::string& refusal = {});

  zmq::context_t& context_;
  zmq::socket_t& dealer_;
  std::optional<BrokerEndpoints> endpoints_;
  std::optional<LinkEvents> link_;  // dealer_'s
  bool welcomed_ = false;
  std::string broker_id_;
  int64_t heartbeat_ms_ = kDefaultHeartbeatMs;
  int64_t hello_sent_ms_ = 0;
  int64_t last_heard_ms_ = 0;               // steady: the last frame from the broker
  int64_t next_switch_ms_ = 0;              // steady: the earliest moment to try the next endpoint
  const char* switch_reason_ = nullptr;     // why the broker in use is to be left; nullptr: it is not
  int64_t unregistered_since_ms_ = 0;       // steady: since when not registered (start, or lost)
  int64_t next_unregistered_report_ms_ = 0; // steady
};

}  // namespace dueq::worker
