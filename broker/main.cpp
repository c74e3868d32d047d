// dueq-broker: the coordinator process. Parses its command line and config,
// then hands over to broker::Broker.
#include <pwd.h>
#include <signal.h>
#include <unistd.h>
#include <sys/signalfd.h>

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "broker/broker.hpp"
#include "broker/embedded_store.hpp"
#include "broker/http_server.hpp"
#include "common/duration.hpp"
#include "common/logging.hpp"

namespace {

// CLI11 validator for durations such as 500ms or 2s.
struct DurationValidator : CLI::Validator {
  DurationValidator() : CLI::Validator("DURATION") {
    func_ = [](std::string& text) -> std::string {
      auto ms = dueq::parse_duration_ms(text);
      return ms ? std::string() : ms.error().message;
    };
  }
};

// The user's home directory from the password database ("" when none).
std::string home_directory() {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(size_t{16} * 1024);
  if (::getpwuid_r(::getuid(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr ||
      found->pw_dir == nullptr)
    return {};
  return found->pw_dir;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dueq;
  broker::BrokerConfig config;
  std::string config_file, redis, data_dir, listen, http, dashboard_token_file, log_level, heartbeat, worker_timeout, delivery_timeout, lease_ttl;
  std::string curve_key, allow_list, leader_lease, advertise;
  bool allow_unsafe = false, insecure = false;

  CLI::App app{"dueq-broker: the dueq coordinator (owns Redis, schedules, leases and dispatches jobs)"};
  app.add_option("--config", config_file, "TOML config file; command-line flags override it")->check(CLI::ExistingFile);
  app.add_option("--redis", redis, "Redis URL: redis://[:password@]host:port[/db] or a unix socket path (none: the embedded store)")->envname("DUEQ_REDIS");
  app.add_option("--data-dir", data_dir, "the embedded store's directory, when no Redis address is given (default ~/.dueq)")->envname("DUEQ_DATA_DIR");
  app.add_option("--listen", listen, "endpoint for workers and producers, e.g. tcp://0.0.0.0:7600")->envname("DUEQ_LISTEN");
  app.add_option("--http", http, "[host]:port for /metrics, /healthz and /readyz (host defaults to 127.0.0.1)")->envname("DUEQ_HTTP");
  app.add_option("--dashboard-token-file", dashboard_token_file, "a file whose first line is the token the dashboard's replay and purge need (none: read-only)")->envname("DUEQ_DASHBOARD_TOKEN_FILE")->check(CLI::ExistingFile);
  app.add_option("--curve-key", curve_key, "the broker's CURVE key file (dueq keygen); turns CURVE on")->envname("DUEQ_CURVE_KEY")->check(CLI::ExistingFile);
  app.add_option("--allow-list", allow_list, "allowed client keys with their roles: a TOML file or a directory (docs/security.md); SIGHUP reloads it")->envname("DUEQ_ALLOW_LIST")->check(CLI::ExistingPath);
  app.add_flag("--insecure", insecure, "listen without CURVE on a non-loopback endpoint (a network you trust)");
  app.add_flag("--allow-unsafe-redis", allow_unsafe, "start even if Redis persistence is off or it may evict keys (development only)");
  app.add_option("--heartbeat", heartbeat, "worker heartbeat interval (default 500ms)")->check(DurationValidator());
  app.add_option("--worker-timeout", worker_timeout, "silence after which a worker is dead (default 1500ms)")->check(DurationValidator());
  app.add_option("--delivery-timeout", delivery_timeout, "a pushed job must be reported by then (default 2s)")->check(DurationValidator());
  app.add_option("--lease-ttl", lease_ttl, "lease length once a worker holds a job (default 10s)")->check(DurationValidator());
  app.add_option("--leader-lease", leader_lease, "brokers sharing a store: the leader's lease, renewed every quarter of it (default 2s)")->check(DurationValidator());
  app.add_option("--advertise", advertise, "the endpoint standby brokers name to clients as this one's (default: the bound one)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);

  if (!config_file.empty()) {
    if (auto ok = broker::load_config_file(config_file, config); !ok) {
      fmt::print(stderr, "dueq-broker: {}\n", ok.error().message);
      return 2;
    }
  }
  if (!redis.empty()) config.redis_url = redis;
  if (!data_dir.empty()) config.data_dir = data_dir;
  if (!listen.empty()) config.listen = listen;
  if (!http.empty()) config.http = http;
  if (!dashboard_token_file.empty()) config.dashboard_token_file = dashboard_token_file;
  if (!log_level.empty()) config.log_level = log_level;
  if (allow_unsafe) config.allow_unsafe_redis = true;
  if (!curve_key.empty()) config.curve_key = curve_key;
  if (!allow_list.empty()) config.allow_list = allow_list;
  if (insecure) config.insecure = true;
  if (!heartbeat.empty()) config.heartbeat_ms = *parse_duration_ms(heartbeat);
  if (!worker_timeout.empty()) config.worker_timeout_ms = *parse_duration_ms(worker_timeout);
  if (!delivery_timeout.empty()) config.delivery_timeout_ms = *parse_duration_ms(delivery_timeout);
  if (!lease_ttl.empty()) config.lease_ttl_ms = *parse_duration_ms(lease_ttl);
  if (!leader_lease.empty()) config.leader_lease_ms = *parse_duration_ms(leader_lease);
  if (!advertise.empty()) config.advertise = advertise;

  if (auto ok = setup_logging("broker", config.log_level); !ok) {
    fmt::print(stderr, "dueq-broker: {}\n", ok.error().message);
    return 2;
  }
  if (auto ok = broker::validate_config(config); !ok) {
    fmt::print(stderr, "dueq-broker: {}\n", ok.error().message);
    return 2;
  }

  // Signals arrive through a file descriptor the event loop polls.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reloads the allow-list
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  // Writing a pipelined round to a Redis that just died must fail with EPIPE
  // (the broker reconnects), not kill the broker.
  signal(SIGPIPE, SIG_IGN);

  // No Redis address: the broker runs its own (started after the signal
  // mask is set, which its thread inherits; redis-server gets none of it).
  std::unique_ptr<broker::EmbeddedStore> store;
  if (config.redis_url.empty()) {
    if (config.data_dir.empty()) {
      const std::string home = home_directory();
      if (home.empty()) {
        fmt::print(stderr, "dueq-broker: give --redis, or --data-dir for the embedded store (this user has no home directory)\n");
        return 2;
      }
      config.data_dir = home + "/.dueq";
    }
    store = std::make_unique<broker::EmbeddedStore>(config.data_dir);
    if (auto ok = store->start(); !ok) {
      spdlog::critical("{}", ok.error().message);
      return ok.error().code == Errc::bad_argument ? 2 : 1;
    }
    config.redis_url = store->url();
    config.data_dir.clear();
  }

  broker::Metrics metrics;
  metrics.publish(wall_ms());  // alive from here on: /healthz counts from this
  broker::AdminGateway admin_gateway;
  std::string dashboard_token;
  if (!config.dashboard_token_file.empty()) {
    auto token = broker::read_dashboard_token(config.dashboard_token_file);
    if (!token) {
      fmt::print(stderr, "dueq-broker: {}\n", token.error().message);
      return 2;
    }
    dashboard_token = std::move(*token);
  }
  broker::Dashboard dashboard(metrics, admin_gateway, std::move(dashboard_token));
  std::unique_ptr<broker::HttpServer> http_server;
  if (!config.http.empty()) {
    http_server = std::make_unique<broker::HttpServer>(metrics, &dashboard);
    if (auto ok = http_server->start(config.http); !ok) {
      spdlog::critical("{}", ok.error().message);
      return 2;
    }
  }

  // A broker that is deposed (another took the lead while it was cut off
  // or stopped) starts over as a fresh one, which stands by.
  while (true) {
    broker::Broker broker(config, metrics, admin_gateway);
    auto started = broker.start(signal_fd);
    if (!started) {
      spdlog::critical("{}", started.error().message);
      return 1;
    }
    if (*started == broker::StartEnd::stopped) return 0;
    if (*started == broker::StartEnd::deposed) continue;
    auto ended = broker.run(signal_fd);
    if (!ended) {
      spdlog::critical("{}", ended.error().message);
      return 1;
    }
    if (*ended == broker::RunEnd::stopped) return 0;
  }
}
