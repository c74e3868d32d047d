// Broker's start: Redis reached (again and again until a signal stops it)
// and its settings checked, the ROUTER socket set up and bound, then
// standing by (broker/standby.cpp) and taking over (broker/take_over.cpp);
// the loop itself is in broker/broker.cpp.
#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "broker/broker.hpp"
#include "broker/store/redis_settings.hpp"
#include "common/build_info.hpp"

namespace dueq::broker {

namespace {
// A connection that never finishes its handshake holds a descriptor this
// long at most (libzmq's default is 30 s).
constexpr int kHandshakeMs = 10'000;
}  // namespace

Result<bool> Broker::wait_for_redis(int signal_fd, const RedisAddress& address) {
  int64_t backoff = 100;
  while (true) {
    auto ok = redis_.connect();
    if (ok) return true;
    if (ok.error().code == Errc::refused) return std::unexpected(ok.error());
    spdlog::warn("waiting for Redis at {}: {}", address.describe(), ok.error().message);
    // Alive (/healthz) while it waits, not ready.
    metrics_.set_health(false, 0, false);
    metrics_.publish(clock_.wall_ms());
    pollfd signal{signal_fd, POLLIN, 0};
    if (::poll(&signal, 1, static_cast<int>(backoff)) > 0) {
      signalfd_siginfo info{};
      if (::read(signal_fd, &info, sizeof info) == sizeof info && info.ssi_signo != SIGHUP) {
        spdlog::info("signal {} while waiting for Redis: stopping", info.ssi_signo);
        return false;
      }
    }
    backoff = std::min<int64_t>(backoff * 2, Broker::kMaxReconnectMs);
  }
}

Result<size_t> Broker::check_redis(const RedisAddress& address) {
  if (auto ok = check_durability_settings(redis_); !ok) {
    if (!config_.allow_unsafe_redis) return std::unexpected(ok.error());
    spdlog::warn("{} (continuing: --allow-unsafe-redis)", ok.error().message);
  }
  if (auto advice = settings_advice(redis_); advice && !advice->empty()) spdlog::warn("Redis: {}", *advice);
  auto pin_bytes = encoding_pin_bytes(redis_);
  if (!pin_bytes) return std::unexpected(pin_bytes.error());
  enqueuer_.use_encoding_pin_bytes(*pin_bytes);
  enqueuer_.use_cluster_registration(address.via_cluster());
  queue_remover_.use_cluster(address.via_cluster());
  return *pin_bytes;
}

Result<void> Broker::open_socket() {
  router_.set(zmq::sockopt::linger, 0);
  // Per peer, messages read off the network ahead of the loop: a peer that
  // sends faster than it is served is held back by TCP instead of filling
  // the broker's memory (at most this many frames of up to 16 MiB each).
  router_.set(zmq::sockopt::rcvhwm, Inbound::kQueuedFramesPerPeer);
  // Per peer: a peer that sends requests and never reads the answers costs
  // at most this many queued messages (then Outbox::send reports it full).
  router_.set(zmq::sockopt::sndhwm, 1'000);
  // Unroutable and unsendable frames are reported, not dropped (Outbox::send).
  router_.set(zmq::sockopt::router_mandatory, 1);
  // A peer announcing a larger message is disconnected before it is read
  // (without this, libzmq buffers each whole message, of any size).
  router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(proto::kMaxFrameBytes));
  // A connection that never finishes its handshake holds a descriptor this
  // long at most (libzmq's default is 30 s).
  router_.set(zmq::sockopt::handshake_ivl, kHandshakeMs);
  if (auto ok = access_.start_zap(router_); !ok) return ok;
  if (!config_.curve_key.empty()) {
    auto keys = read_curve_key_file(config_.curve_key);
    if (!keys) return std::unexpected(keys.error());
    if (auto ok = access_.enable(router_, *keys, config_.allow_list); !ok) return ok;
  } else {
    spdlog::warn("CURVE off: plaintext on {}{}", config_.listen,
                 is_local_endpoint(config_.listen) ? " (this host only)" : " (--insecure)");
  }
  try {
    router_.bind(config_.listen);
  } catch (const zmq::error_t& e) {
    return fail(Errc::bad_argument, fmt::format("cannot listen on {}: {}", config_.listen, e.what()));
  }
  bound_endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  spdlog::info("open-file limit {} (connections past it are turned away, see ConnectionGate)",
               ConnectionGate::raise_open_files_limit());
  return {};
}

Result<StartEnd> Broker::start(int signal_fd) {
  auto address = parse_redis_url(config_.redis_url);
  if (!address) return std::unexpected(address.error());
  if (auto ok = validate_config(config_); !ok) return std::unexpected(ok.error());
  auto connected = wait_for_redis(signal_fd, *address);
  if (!connected) return std::unexpected(connected.error());
  if (!*connected) return StartEnd::stopped;
  auto pin_bytes = check_redis(*address);
  if (!pin_bytes) return std::unexpected(pin_bytes.error());
  if (auto ok = open_socket(); !ok) return std::unexpected(ok.error());

  auto leading = stand_by(signal_fd);
  if (!leading) return std::unexpected(leading.error());
  if (!*leading) return StartEnd::stopped;
  if (auto taken = take_over(*pin_bytes); !taken) {
    const Errc code = taken.error().code;
    if (code != Errc::fenced && code != Errc::unavailable && code != Errc::not_master) return std::unexpected(taken.error());
    spdlog::warn("taking over failed: {}; standing by again", taken.error().message);
    return StartEnd::deposed;
  }
  admin_.start(leadership_.epoch());
  admin_gateway_.attach(&admin_);
  reconciler_ = std::make_unique<Reconciler>(*address, config_.reconcile_interval_ms, background_budget_);
  reconciler_->start(leadership_.epoch());
  if (address->via_sentinel()) sentinel_watch_.start();
  spdlog::info("broker {} listening on {}, Redis {}, {} known queues (dueq {}, {})", broker_id_, bound_endpoint_,
               address->describe(), queues_.size(), build_commit(), build_type());
  return StartEnd::serving;
}

}  // namespace dueq::broker
