#include "broker/loop/lease_extensions.hpp"

#include <algorithm>

#include "broker/store/keys.hpp"

namespace dueq::broker {

namespace {
constexpr size_t kExtendChunk = 1000;  // keeps one extend call to a few ms
}  // namespace

namespace calls {

Command extend(const std::string& queue, int64_t deadline_ms, LeaseReport report, const std::vector<TokenRef>& items) {
  QueueKeys k(queue);
  Command call = script_call(lua::ScriptId::extend, {k.leased, k.stats, k.tokens, k.started, k.unique});
  call.add(deadline_ms).add(report == LeaseReport::started ? "started" : "held").add(static_cast<int64_t>(items.size()));
  for (const auto& item : items) call.add(item.id).add(token_text(item.token));
  return call;
}

Result<std::vector<ExtendReply>> parse_extend(const redisReply* r, size_t items) {
  static constexpr std::array kKnown{ExtendReply::stale, ExtendReply::extended};
  auto replies = reply::codes(r, "extend", kKnown);
  if (replies && replies->size() != items) return reply::bad(r, "extend");
  return replies;
}

}  // namespace calls

void LeaseExtensions::add_to(Round& round) {
  if (refusals_.holding()) return;
  const int64_t deadline = lease_clock_.now_ms() + config_.lease_ttl_ms;
  for (auto& [key, items] : std::exchange(extends_, {})) {
    const std::string& name = key.first;
    if (refusals_.holding(name)) continue;  // its slot is moving: the next heartbeat asks again
    for (size_t i = 0; i < items.size(); i += kExtendChunk) {
      const auto first = items.begin() + static_cast<std::ptrdiff_t>(i);
      std::vector<TokenRef> chunk(first, first + static_cast<std::ptrdiff_t>(std::min(items.size() - i, kExtendChunk)));
      Command call = calls::extend(name, deadline, key.second, chunk);
      round.add(std::move(call), [this, name, deadline, chunk = std::move(chunk)](const redisReply* r) {
        auto applied = calls::parse_extend(r, chunk.size());
        if (!applied) return;  // asked again by the next heartbeat
        for (size_t j = 0; j < chunk.size(); ++j) {
          if ((*applied)[j] == calls::ExtendReply::extended) {
            if (InflightJob* job = inflight_.find(name, chunk[j].id); job && job->token == chunk[j].token) {
              job->lease_deadline_ms = deadline;
              if (job->confirms_holder && holder_confirmed_) holder_confirmed_(job->worker);
              job->confirms_holder = false;
            }
          } else {
            // That delivery is no longer current (re-leased or finished):
            // the worker's eventual result will be rejected as stale.
            inflight_.remove(name, chunk[j].id, chunk[j].token);
          }
        }
      });
    }
  }
}

}  // namespace dueq::broker
