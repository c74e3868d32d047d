#include "clients/cpp/request_tracker.hpp"

#include <algorithm>
#include <utility>

namespace dueq::client {

void RequestTracker::track(uint64_t request_id, std::string bytes, Completion done, int64_t now_ms) {
  pending_by_id_.emplace(request_id, Pending{std::move(bytes), std::move(done), attempts_, false});
  deadlines_.emplace_back(now_ms + timeout_ms_, request_id);
  ++unsent_;
}

void RequestTracker::send_unsent(const std::function<bool(std::string_view)>& send) {
  if (unsent_ == 0) return;
  for (auto& [id, pending] : pending_by_id_) {
    if (pending.sent) continue;
    if (!send(pending.bytes)) return;
    pending.sent = true;
    --unsent_;
  }
}

Completion RequestTracker::finish(std::unordered_map<uint64_t, Pending>::iterator it) {
  Completion done = std::move(it->second.done);
  if (!it->second.sent) --unsent_;
  pending_by_id_.erase(it);
  return done;
}

bool RequestTracker::answer(proto::Frame reply) {
  auto it = pending_by_id_.find(proto::request_id_of(reply));
  if (it == pending_by_id_.end()) return false;
  Completion done = finish(it);
  if (auto* error = std::get_if<proto::ErrorFrame>(&reply))
    done(std::unexpected(ClientError{error->code, error->message, error->retry_after_ms}));
  else
    done(std::move(reply));
  return true;
}

size_t RequestTracker::expire(int64_t now_ms, const std::function<ClientError()>& timeout_error) {
  size_t timed_out = 0;
  while (!deadlines_.empty() && deadlines_.front().first <= now_ms) {
    const uint64_t id = deadlines_.front().second;
    deadlines_.pop_front();
    auto it = pending_by_id_.find(id);
    if (it == pending_by_id_.end()) continue;
    Pending& pending = it->second;
    ++timed_out;
    if (--pending.attempts_left > 0) {
      deadlines_.emplace_back(now_ms + timeout_ms_, id);
      if (pending.sent) ++unsent_;
      pending.sent = false;
      continue;
    }
    finish(it)(std::unexpected(timeout_error()));
  }
  return timed_out;
}

void RequestTracker::send_all_again() {
  for (auto& [id, pending] : pending_by_id_) pending.sent = false;
  unsent_ = pending_by_id_.size();
}

int64_t RequestTracker::ms_until_next_deadline(int64_t now_ms) const {
  if (deadlines_.empty()) return -1;
  return std::max<int64_t>(0, deadlines_.front().first - now_ms);
}

void RequestTracker::fail_all(const ClientError& error) {
  auto failed = std::exchange(pending_by_id_, {});
  deadlines_.clear();
  unsent_ = 0;
  for (auto& [id, pending] : failed) pending.done(std::unexpected(error));
}

}  // namespace dueq::client
