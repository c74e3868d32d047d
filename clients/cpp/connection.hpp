#pragma once
// A client's one connection to the broker. One I/O thread owns the DEALER
// socket; any thread hands it requests through a locked queue and an
// eventfd, so many requests can be outstanding on one connection.
// Requests are idempotent (enqueues carry their job ids), so the
// RequestTracker may send one again.
#include <atomic>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "clients/cpp/request_tracker.hpp"
#include "common/broker_endpoints.hpp"
#include "common/link_events.hpp"
#include "common/unique_fd.hpp"

namespace dueq::client {

class Connection {
 public:
  // `endpoints`: one, or several separated by commas (common/broker_endpoints.hpp).
  Connection(const std::string& endpoints, ClientOptions options);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Ends the I/O thread, which answers what is pending "unavailable". Called
  // by ~Client before its members go: callbacks answered then may still
  // call the client.
  void close();

  // From any thread: encodes the request here (off the I/O thread) and
  // queues it; `done` runs on the I/O thread with the reply or the error.
  template <typename Request>
  void submit(Request request, Completion done) {
    request.request_id = new_request_id();
    // Checked here as the broker would: a frame it cannot accept would be
    // answered as a whole, never as this request's own mistake.
    if (auto ok = proto::validate(proto::Frame{request}); !ok)
      return refuse(ClientError{"bad_argument", ok.error().message, 0}, std::move(done));
    queue_for_io(Outgoing{request.request_id, proto::encode(request), std::move(done), std::nullopt, std::nullopt});
  }

  // An enqueue stays unencoded until the I/O thread takes it: it may share
  // a frame with others taken at the same moment (clients/cpp/enqueue_merge.hpp).
  void submit(proto::Enqueue request, Completion done);

  // Answers `error` from the I/O thread, like any reply: a caller holding
  // a lock its callback takes must not find the callback run in its call.
  void refuse(ClientError error, Completion done);

  bool on_io_thread() const { return std::this_thread::get_id() == io_.get_id(); }

 private:
  struct Outgoing {
    uint64_t request_id;
    std::string bytes;  // the encoded request; empty for an enqueue not encoded yet
    Completion done;
    std::optional<proto::Enqueue> enqueue;
    std::optional<ClientError> refused;  // answered at once, not sent
  };

  uint64_t new_request_id() { return next_request_id_.fetch_add(1) + 1; }
  void queue_for_io(Outgoing&& outgoing);
  void wake();
  void run();
  void take_incoming();
  void receive_all();
  ClientError timeout_error() const;
  // Several endpoints: leaves the broker in use for the next one (at once,
  // or kPassPauseMs after a whole pass found no leader) and sends every
  // unanswered request there.
  void switch_broker();
  void switch_if_due(int64_t now_ms);
  static constexpr int64_t kPassPauseMs = 100;

  const ClientOptions options_;
  zmq::context_t context_;
  zmq::socket_t socket_;  // the I/O thread's only
  BrokerEndpoints endpoints_;
  std::optional<LinkEvents> link_;  // socket_'s
  UniqueFd wakeup_;
  std::atomic<uint64_t> next_request_id_{0};
  std::atomic<bool> stopping_{false};

  std::mutex incoming_mutex_;
  std::deque<Outgoing> incoming_;  // guarded by incoming_mutex_
  bool closed_ = false;            // guarded by incoming_mutex_; set when the I/O thread ends

  // The I/O thread's own.
  RequestTracker requests_;
  int64_t link_down_since_ms_ = 0;  // steady; when the link was last up, or the connection made
  // connect_timeout_ms: fails what waits when the link is not up in time.
  void fail_if_link_down(int64_t now_ms, bool refused_now);
  ClientError link_error() const;
  bool switch_wanted_ = false;
  int64_t next_switch_ms_ = 0;      // steady
  std::thread io_;  // last: starts after everything it uses exists
};

}  // namespace dueq::client
