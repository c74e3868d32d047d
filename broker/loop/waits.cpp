#include "broker/loop/waits.hpp"

#include <algorithm>

#include "broker/store/keys.hpp"
#include "broker/store/schedule_partition.hpp"

namespace dueq::broker {

namespace {
// job_ends.lua's states, named once.
enum class EndCode : int64_t { unknown = -1, pending = 0, done = 1, dead = 2, cancelled = 3 };
constexpr std::array kEndCodes{EndCode::unknown, EndCode::pending, EndCode::done, EndCode::dead, EndCode::cancelled};
}  // namespace

namespace calls {

Command job_ends(const std::string& queue, const std::vector<std::string>& ids) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::job_ends, {k.schedule, k.jobs, k.done, k.dead, k.cancelled, k.results, k.errors});
  call.add(static_cast<int64_t>(ids.size()));
  for (const auto& id : ids) call.add(id).add(static_cast<int64_t>(schedule_partition(id)));
  return call;
}

Result<std::vector<std::optional<JobEnd>>> parse_job_ends(const redisReply* r, size_t ids) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 3 * ids) return reply::bad(r, "job_ends");
  std::vector<std::optional<JobEnd>> out;
  out.reserve(ids);
  for (size_t i = 0; i < ids; ++i) {
    const redisReply* state = r->element[3 * i];
    const redisReply* at = r->element[3 * i + 1];
    const redisReply* text = r->element[3 * i + 2];
    if (state->type != REDIS_REPLY_INTEGER || at->type != REDIS_REPLY_INTEGER || text->type != REDIS_REPLY_STRING)
      return reply::bad(r, "job_ends");
    const auto code = reply::code(state->integer, kEndCodes);
    if (!code) return reply::bad(r, "job_ends");
    switch (*code) {
      case EndCode::pending: out.emplace_back(); break;
      case EndCode::unknown: out.push_back(JobEnd{"unknown"}); break;
      case EndCode::done: out.push_back(JobEnd{"done", at->integer, reply::str(text), {}}); break;
      case EndCode::dead: out.push_back(JobEnd{"dead", at->integer, {}, reply::str(text)}); break;
      case EndCode::cancelled: out.push_back(JobEnd{"cancelled", at->integer}); break;
    }
  }
  return out;
}

}  // namespace calls

bool WaitRegistry::add(const std::string& queue, const std::string& id, Waiter waiter) {
  auto& waiting = by_job_[{queue, id}];
  const auto same = std::find_if(waiting.begin(), waiting.end(), [&](const Waiter& w) {
    return w.peer.routing_id == waiter.peer.routing_id && w.request_id == waiter.request_id;
  });
  waiter.seq = ++next_seq_;
  if (same != waiting.end()) {
    deadlines_.erase(deadlines_.find(same->deadline_ms));
    deadlines_.insert(waiter.deadline_ms);
    *same = std::move(waiter);
    return true;
  }
  size_t& of_peer = per_peer_[waiter.peer.routing_id];
  if (of_peer >= kMaxPerPeer || size_ >= kMax) {
    if (of_peer == 0) per_peer_.erase(waiter.peer.routing_id);
    if (waiting.empty()) by_job_.erase({queue, id});
    return false;
  }
  ++of_peer;
  ++size_;
  deadlines_.insert(waiter.deadline_ms);
  waiting.push_back(std::move(waiter));
  return true;
}

void WaitRegistry::forget(const Waiter& waiter) {
  --size_;
  deadlines_.erase(deadlines_.find(waiter.deadline_ms));
  if (auto it = per_peer_.find(waiter.peer.routing_id); it != per_peer_.end() && --it->second == 0) per_peer_.erase(it);
}

std::vector<WaitRegistry::Waiter> WaitRegistry::take(const std::string& queue, const std::string& id) {
  auto it = by_job_.find({queue, id});
  if (it == by_job_.end()) return {};
  std::vector<Waiter> out = std::move(it->second);
  by_job_.erase(it);
  for (const auto& w : out) forget(w);
  return out;
}

std::vector<std::pair<WaitRegistry::JobKey, WaitRegistry::Waiter>> WaitRegistry::take_expired(int64_t now_ms) {
  std::vector<std::pair<JobKey, Waiter>> out;
  if (deadlines_.empty() || *deadlines_.begin() > now_ms) return out;
  for (auto it = by_job_.begin(); it != by_job_.end();) {
    auto& waiting = it->second;
    for (auto w = waiting.begin(); w != waiting.end();) {
      if (w->deadline_ms > now_ms || (!w->read && w->deadline_ms + kUnreadGraceMs > now_ms)) {
        ++w;
        continue;
      }
      forget(*w);
      out.emplace_back(it->first, std::move(*w));
      w = waiting.erase(w);
    }
    it = waiting.empty() ? by_job_.erase(it) : std::next(it);
  }
  return out;
}

void WaitRegistry::mark_read(const std::string& queue, const std::string& id, uint64_t up_to_seq) {
  auto it = by_job_.find({queue, id});
  if (it == by_job_.end()) return;
  for (auto& w : it->second)
    if (w.seq <= up_to_seq) w.read = true;
}

std::vector<std::string> WaitRegistry::ids(const std::string& queue) const {
  std::vector<std::string> out;
  for (auto it = by_job_.lower_bound({queue, ""}); it != by_job_.end() && it->first.first == queue; ++it)
    out.push_back(it->first.second);
  return out;
}

std::vector<std::string> WaitRegistry::queues() const {
  std::vector<std::string> out;
  for (const auto& [job, waiting] : by_job_)
    if (out.empty() || out.back() != job.first) out.push_back(job.first);
  return out;
}

void Waits::on_wait(const Peer& peer, const proto::WaitRequest& request) {
  const int64_t deadline = clock_.steady_ms() + request.timeout_ms;
  if (!registry_.add(request.queue, request.id, {peer, request.request_id, deadline})) {
    outbox_.send(peer, proto::ErrorFrame{request.request_id, "overloaded",
                                         "too many waits: at most 1,000 per connection and 10,000 in all; retry later", 1000});
    return;
  }
  fresh_[request.queue].insert(request.id);
}

void Waits::answer(const WaitRegistry::Waiter& waiter, const JobEnd& end) {
  outbox_.send(waiter.peer, proto::WaitReply{waiter.request_id, end.state, end.finished_ms, proto::Bytes{end.result}, end.error});
}

void Waits::ended(const std::string& queue, const std::string& id, const JobEnd& end) {
  for (const auto& waiter : registry_.take(queue, id)) answer(waiter, end);
}

void Waits::add_to(Round& round) {
  const int64_t now = clock_.steady_ms();
  for (const auto& [job, waiter] : registry_.take_expired(now)) answer(waiter, JobEnd{"pending"});
  if (registry_.size() == 0) {
    fresh_.clear();
    dirty_.clear();
    return;
  }
  if (now >= next_recheck_ms_) {
    next_recheck_ms_ = now + kRecheckMs;
    for (auto& queue : registry_.queues()) dirty_.insert(std::move(queue));
  }
  for (const auto& queue : std::exchange(dirty_, {})) {
    fresh_.erase(queue);
    read(round, queue, registry_.ids(queue));
  }
  for (auto& [queue, ids] : std::exchange(fresh_, {})) read(round, queue, {ids.begin(), ids.end()});
}

// In calls of at most kJobEndsPerCall ids; a failed read is left to the
// next recheck.
void Waits::read(Round& round, const std::string& queue, std::vector<std::string> ids) {
  for (size_t from = 0; from < ids.size(); from += calls::kJobEndsPerCall) {
    std::vector<std::string> some(ids.begin() + static_cast<std::ptrdiff_t>(from),
                                  ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), from + calls::kJobEndsPerCall)));
    Command call = calls::job_ends(queue, some);
    round.add(std::move(call), [this, queue, some = std::move(some), seq = registry_.last_seq()](const redisReply* r) {
      if (r == nullptr) return;
      auto ends = calls::parse_job_ends(r, some.size());
      if (!ends) return;
      for (size_t i = 0; i < some.size(); ++i) {
        if ((*ends)[i]) ended(queue, some[i], *(*ends)[i]);
        else registry_.mark_read(queue, some[i], seq);
      }
    });
  }
}

int64_t Waits::us_until_next() const {
  const int64_t deadline = registry_.earliest_deadline_ms();
  if (deadline < 0) return -1;
  // A deadline passed whose read is still out: looked at again in a millisecond.
  const int64_t at = std::min(deadline, next_recheck_ms_);
  return std::max<int64_t>(1000, (at - clock_.steady_ms()) * 1000);
}

}  // namespace dueq::broker
