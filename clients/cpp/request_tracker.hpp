#pragma once
// The requests a client connection has sent (or is about to send) and not
// had answered: each is sent again when unanswered for timeout_ms and fails
// after `attempts` sends. Owned by the connection's I/O thread alone.
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/protocol.hpp"
#include "dueq/client.hpp"

namespace dueq::client {

using FrameResult = std::expected<proto::Frame, ClientError>;
using Completion = std::function<void(FrameResult)>;

class RequestTracker {
 public:
  RequestTracker(int64_t timeout_ms, int attempts) : timeout_ms_(timeout_ms), attempts_(attempts) {}

  // `bytes` is the encoded request, sent as it is on every attempt.
  void track(uint64_t request_id, std::string bytes, Completion done, int64_t now_ms);

  // Sends what is waiting to be sent, in no particular order, until `send`
  // refuses one (a DEALER with no usable connection): the rest wait for the
  // next call or their deadline.
  void send_unsent(const std::function<bool(std::string_view)>& send);
  bool has_unsent() const { return unsent_ > 0; }

  // Answers the request the reply names; false when none waits for it (a
  // late reply to a request already answered or failed).
  bool answer(proto::Frame reply);

  // Requests past their deadline are sent again, or fail with
  // `timeout_error()` once their attempts are spent. Returns how many timed
  // out, either way: each says the broker did not answer in time, also a
  // request's last attempt (with one attempt, the only one).
  size_t expire(int64_t now_ms, const std::function<ClientError()>& timeout_error);

  // Every request waiting for an answer is sent again, without using an
  // attempt (the connection moved to another broker).
  void send_all_again();

  // Until the earliest deadline; -1 with nothing outstanding.
  int64_t ms_until_next_deadline(int64_t now_ms) const;

  // Fails every request with `error` (the connection is closing).
  void fail_all(const ClientError& error);

 private:
  struct Pending {
    std::string bytes;
    Completion done;
    int attempts_left = 0;
    bool sent = false;
  };

  // Takes a request out of the tracker, keeping the unsent count right.
  Completion finish(std::unordered_map<uint64_t, Pending>::iterator it);

  const int64_t timeout_ms_;
  const int attempts_;
  std::unordered_map<uint64_t, Pending> pending_by_id_;
  // (steady ms, request id), in the order set: every deadline is timeout_ms
  // after it was set, so the earliest is at the front; the entries of
  // requests answered meanwhile are skipped.
  std::deque<std::pair<int64_t, uint64_t>> deadlines_;
  size_t unsent_ = 0;
};

}  // namespace dueq::client
