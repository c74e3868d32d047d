#include "worker/broker_link.hpp"

#include <spdlog/spdlog.h>

#include "common/curve.hpp"

namespace dueq::worker {

namespace {
// With several broker endpoints: a broker silent this many heartbeats is
// left for the next endpoint, and a whole pass that found no leader waits
// this long before the next.
constexpr int64_t kSilentHeartbeats = 3;
constexpr int64_t kPassPauseMs = 100;
// Not registered this long (or refused): the worker says why, then again
// every kUnregisteredReportMs while it lasts.
constexpr int64_t kUnregisteredWarnMs = 2'000;
constexpr int64_t kUnregisteredReportMs = 10'000;
}  // namespace

Result<void> BrokerLink::open(const std::string& worker_id, const std::string& brokers, const std::string& broker_key,
                              const std::string& key_file, int64_t now_ms) {
  dealer_.set(zmq::sockopt::routing_id, worker_id);
  dealer_.set(zmq::sockopt::linger, 2000);
  dealer_.set(zmq::sockopt::reconnect_ivl, 100);
  dealer_.set(zmq::sockopt::reconnect_ivl_max, 1000);
  auto curve = load_client_curve(broker_key, key_file);
  if (!curve) return std::unexpected(curve.error());
  apply_client_curve(dealer_, *curve);
  auto parsed = BrokerEndpoints::parse(brokers);
  if (!parsed) return std::unexpected(parsed.error());
  endpoints_.emplace(std::move(*parsed));
  try {
    link_.emplace(context_, dealer_, curve->enabled());
    dealer_.connect(endpoints_->current());
  } catch (const zmq::error_t& e) {
    return fail(Errc::bad_argument, fmt::format("cannot connect to broker endpoint '{}': {}", endpoints_->current(), e.what()));
  }
  unregistered_since_ms_ = now_ms;
  return {};
}

bool BrokerLink::on_welcome(const proto::Welcome& welcome) {
  const bool news = broker_id_.empty() || broker_id_ != welcome.broker_id || !welcomed_;
  next_unregistered_report_ms_ = 0;
  welcomed_ = true;
  broker_id_ = welcome.broker_id;
  heartbeat_ms_ = welcome.heartbeat_ms;
  return news;
}

void BrokerLink::on_refused(int64_t now_ms, const std::string& message) {
  report_unregistered(now_ms, fmt::format("the broker at {} refused this worker: {}", endpoint(), message));
}

void BrokerLink::on_turn(int64_t now_ms, bool events_ready) {
  LinkEvents::Update update;
  if (events_ready) update = link_->read(endpoint());
  if (update.up) spdlog::info("connected to the broker at {}", endpoint());
  if (update.refused) report_unregistered(now_ms, link_->diagnosis(endpoint()).text);
  // With one endpoint ZeroMQ reconnects by itself.
  if (endpoints_->several()) {
    if (update.lost) switch_broker("the connection is down");
    else if (welcomed_ && now_ms - last_heard_ms_ > kSilentHeartbeats * heartbeat_ms_) switch_broker("it fell silent");
  }
  report_unregistered(now_ms);
}

bool BrokerLink::hello_unanswered(int64_t now_ms) {
  if (welcomed_ || now_ms - hello_sent_ms_ < kHelloRetryMs) return false;
  if (endpoints_->several()) {
    switch_broker("no WELCOME");
    return false;
  }
  return true;
}

// Several endpoints: the broker in use is left for the next one, at once
// or, after a whole pass found no leader, kPassPauseMs later.
void BrokerLink::switch_broker(const char* why) {
  if (switch_reason_ == nullptr) switch_reason_ = why;
}

int64_t BrokerLink::ms_until_switch(int64_t now_ms) const {
  return switch_reason_ == nullptr ? -1 : std::max<int64_t>(0, next_switch_ms_ - now_ms);
}

// The worker then says HELLO at the new endpoint (listing what it holds,
// which the new leader adopts; results not yet confirmed go again after
// its WELCOME).
bool BrokerLink::switch_if_due(int64_t now_ms) {
  if (switch_reason_ == nullptr || now_ms < next_switch_ms_) return false;
  const std::string left = endpoint();
  try {
    dealer_.disconnect(left);
  } catch (const zmq::error_t&) {
    // Not connected there (a refused endpoint): nothing to leave.
  }
  const bool new_pass = endpoints_->next();
  next_switch_ms_ = new_pass ? now_ms + kPassPauseMs : now_ms;
  dealer_.connect(endpoint());
  if (welcomed_) spdlog::warn("leaving broker {} ({}): trying {}", left, switch_reason_, endpoint());
  switch_reason_ = nullptr;
  set_unregistered(now_ms);
  link_->forget();
  return true;
}

// Registered no more (a new endpoint, or the broker forgot this worker).
void BrokerLink::set_unregistered(int64_t now_ms) {
  if (welcomed_) unregistered_since_ms_ = now_ms;
  welcomed_ = false;
}

// Not registered: why, in words a user can act on (at once when the broker
// refused, after kUnregisteredWarnMs otherwise; then every
// kUnregisteredReportMs).
void BrokerLink::report_unregistered(int64_t now_ms, const std::string& refusal) {
  if (welcomed_ || now_ms < next_unregistered_report_ms_) return;
  if (refusal.empty() && now_ms - unregistered_since_ms_ < kUnregisteredWarnMs) return;
  next_unregistered_report_ms_ = now_ms + kUnregisteredReportMs;
  if (!refusal.empty()) {
    spdlog::error("{}; retrying every {} s", refusal, kHelloRetryMs / 1000);
    return;
  }
  const auto why = link_->diagnosis(endpoint());
  spdlog::warn("not registered with a broker after {} s: {}", (now_ms - unregistered_since_ms_) / 1000,
               why.text.empty() ? "connected, and no WELCOME came for HELLO (is it a dueq-broker that leads?)" : why.text);
}

}  // namespace dueq::worker
