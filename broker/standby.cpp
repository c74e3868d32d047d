// Broker's standby mode: until this broker leads (broker/loop/leadership.hpp) it
// answers every frame "not_leader" and asks for the lease every
// kStandbyAskMs; the rest of the Broker is in broker/broker.cpp.
#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include <spdlog/spdlog.h>

#include "broker/broker.hpp"

namespace dueq::broker {

Result<bool> Broker::stand_by(int signal_fd) {
  const std::string advertised = advertised_endpoint();
  std::vector<zmq::pollitem_t> items = {
      {router_.handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, signal_fd, ZMQ_POLLIN, 0},
      {connection_monitor_.handle(), 0, ZMQ_POLLIN, 0},
      {access_.zap_handle(), 0, ZMQ_POLLIN, 0},
  };
  std::string told_leader = "(none yet)";
  int64_t next_ask_ms = clock_.steady_ms();
  while (true) {
    if (const int64_t now = clock_.steady_ms(); now >= next_ask_ms) {
      next_ask_ms = now + kStandbyAskMs;
      if (!redis_.connected()) (void)redis_.connect();
      if (redis_.connected()) {
        auto led = leadership_.try_lead(redis_, advertised);
        if (!led) {
          if (led.error().code == Errc::refused) return std::unexpected(led.error());
          redis_.disconnect();
        } else if (*led) {
          inbound_.lead();
          return true;
        } else if (leadership_.leader_endpoint() != told_leader) {
          told_leader = leadership_.leader_endpoint();
          spdlog::info("standing by: another broker leads{}", told_leader.empty() ? "" : " at " + told_leader);
        }
      }
      inbound_.stand_by(leadership_.leader_endpoint(), advertised, config_.leader_lease_ms);
      metrics_.set_health(false, 0, redis_.connected());
      metrics_.publish(clock_.wall_ms());
    }
    try {
      zmq::poll(items.data(), items.size(),
                std::chrono::milliseconds(std::max<int64_t>(0, next_ask_ms - clock_.steady_ms())));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return fail(Errc::internal, std::string("poll failed: ") + e.what());
    }
    if (items[1].revents & ZMQ_POLLIN) {
      signalfd_siginfo info{};
      if (::read(signal_fd, &info, sizeof info) == sizeof info) {
        if (info.ssi_signo != SIGHUP) {
          spdlog::info("signal {} while standing by: stopping", info.ssi_signo);
          return false;
        }
        access_.reload();
      }
    }
    if (items[2].revents & ZMQ_POLLIN) gate_.at_fd_limit(connection_monitor_.drain(clock_.steady_ms()));
    gate_.tick();
    if (items[3].revents & ZMQ_POLLIN) access_.answer_zap(clock_.steady_ms(), gate_);
    if (items[0].revents & ZMQ_POLLIN) inbound_.receive(config_.max_frames_per_turn, connection_monitor_.connections());
  }
}

std::string Broker::advertised_endpoint() const {
  if (!config_.advertise.empty()) return config_.advertise;
  const bool wildcard = bound_endpoint_.find("0.0.0.0") != std::string::npos ||
                        bound_endpoint_.find("//*") != std::string::npos || bound_endpoint_.find("[::]") != std::string::npos;
  return wildcard || !bound_endpoint_.starts_with("tcp://") ? std::string() : bound_endpoint_;
}

}  // namespace dueq::broker
