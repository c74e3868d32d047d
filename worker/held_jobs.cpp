#include "worker/held_jobs.hpp"

namespace dueq::worker {

std::shared_ptr<CancelState> HeldJobs::cancel_state(const proto::JobRef& ref) {
  auto state = std::make_shared<CancelState>();
  cancel_states_[key(ref.queue, ref.id)] = state;
  return state;
}

void HeldJobs::forget(const proto::JobRef& ref) {
  const std::string k = key(ref.queue, ref.id);
  if (auto it = held_.find(k); it != held_.end() && it->second.token == ref.token) {
    held_.erase(it);
    cancel_states_.erase(k);
  }
}

void HeldJobs::finished(const proto::JobResult& result) {
  forget(proto::JobRef{result.queue, result.id, result.token});
  unconfirmed_[key(result.queue, result.id)] = result;
}

void HeldJobs::confirmed(const proto::JobRef& ref) {
  auto it = unconfirmed_.find(key(ref.queue, ref.id));
  if (it != unconfirmed_.end() && it->second.token == ref.token) unconfirmed_.erase(it);
}

void HeldJobs::stop_running(const proto::JobRef& ref) {
  if (!holds(ref)) return;
  if (auto state = cancel_states_.find(key(ref.queue, ref.id)); state != cancel_states_.end()) {
    state->second->by_user = true;
    state->second->stop = true;
  }
}

void HeldJobs::stop_all() {
  for (auto& [k, state] : cancel_states_) state->stop = true;
}

std::vector<proto::JobRef> HeldJobs::refs() const {
  std::vector<proto::JobRef> out;
  out.reserve(held_.size());
  for (const auto& [k, ref] : held_) out.push_back(ref);
  return out;
}

std::vector<proto::JobResult> HeldJobs::unconfirmed() const {
  std::vector<proto::JobResult> out;
  out.reserve(unconfirmed_.size());
  for (const auto& [k, result] : unconfirmed_) out.push_back(result);
  return out;
}

}  // namespace dueq::worker
