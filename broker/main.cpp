// dueq-broker: the coordinator process. Parses its command line and config,
// then hands over to broker::Broker.
#include <pwd.h>
#include <signal.h>
#include <unistd.h>
#include <sys/signalfd.h>

#include <expected>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "common/build_info.hpp"
#include "broker/broker.hpp"
#include "broker/store/embedded_store.hpp"
#include "broker/http/http_server.hpp"
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

// The command line: each flag, when given, overrides the config file.
struct Flags {
  std::string config_file, redis, data_dir, listen, http, dashboard_token_file, log_level, heartbeat, worker_timeout,
      delivery_timeout, lease_ttl, curve_key, allow_list, leader_lease, advertise;
  bool allow_unsafe = false, insecure = false;
};

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--config", f.config_file, "TOML config file; command-line flags override it")->check(CLI::ExistingFile);
  app.add_option("--redis", f.redis, "Redis URL: redis://[:password@]host:port[/db] or a unix socket path (none: the embedded store)")->envname("DUEQ_REDIS");
  app.add_option("--data-dir", f.data_dir, "the embedded store's directory, when no Redis address is given (default ~/.dueq)")->envname("DUEQ_DATA_DIR");
  app.add_option("--listen", f.listen, "endpoint for workers and producers, e.g. tcp://0.0.0.0:7600")->envname("DUEQ_LISTEN");
  app.add_option("--http", f.http, "[host]:port for /metrics, /healthz and /readyz (host defaults to 127.0.0.1)")->envname("DUEQ_HTTP");
  app.add_option("--dashboard-token-file", f.dashboard_token_file, "a file whose first line is the token the dashboard's replay and purge need (none: read-only)")->envname("DUEQ_DASHBOARD_TOKEN_FILE")->check(CLI::ExistingFile);
  app.add_option("--curve-key", f.curve_key, "the broker's CURVE key file (dueq keygen); turns CURVE on")->envname("DUEQ_CURVE_KEY")->check(CLI::ExistingFile);
  app.add_option("--allow-list", f.allow_list, "allowed client keys with their roles: a TOML file or a directory (docs/security.md); SIGHUP reloads it")->envname("DUEQ_ALLOW_LIST")->check(CLI::ExistingPath);
  app.add_flag("--insecure", f.insecure, "listen without CURVE on a non-loopback endpoint (a network you trust)");
  app.add_flag("--allow-unsafe-redis", f.allow_unsafe, "start even if Redis persistence is off or it may evict keys (development only)");
  app.add_option("--heartbeat", f.heartbeat, "worker heartbeat interval (default 500ms)")->check(DurationValidator());
  app.add_option("--worker-timeout", f.worker_timeout, "silence after which a worker is dead (default 1500ms)")->check(DurationValidator());
  app.add_option("--delivery-timeout", f.delivery_timeout, "a pushed job must be reported by then (default 2s)")->check(DurationValidator());
  app.add_option("--lease-ttl", f.lease_ttl, "lease length once a worker holds a job (default 10s)")->check(DurationValidator());
  app.add_option("--leader-lease", f.leader_lease, "brokers sharing a store: the leader's lease, renewed every quarter of it (default 2s)")->check(DurationValidator());
  app.add_option("--advertise", f.advertise, "the endpoint standby brokers name to clients as this one's (default: the bound one)");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error");
}

void apply_flags(const Flags& f, dueq::broker::BrokerConfig& config) {
  auto text = [](const std::string& flag, std::string& field) {
    if (!flag.empty()) field = flag;
  };
  // The validator checked each duration already.
  auto duration = [](const std::string& flag, int64_t& field) {
    if (!flag.empty()) field = *dueq::parse_duration_ms(flag);
  };
  text(f.redis, config.redis_url);
  text(f.data_dir, config.data_dir);
  text(f.listen, config.listen);
  text(f.http, config.http);
  text(f.dashboard_token_file, config.dashboard_token_file);
  text(f.log_level, config.log_level);
  text(f.curve_key, config.curve_key);
  text(f.allow_list, config.allow_list);
  text(f.advertise, config.advertise);
  if (f.allow_unsafe) config.allow_unsafe_redis = true;
  if (f.insecure) config.insecure = true;
  duration(f.heartbeat, config.heartbeat_ms);
  duration(f.worker_timeout, config.worker_timeout_ms);
  duration(f.delivery_timeout, config.delivery_timeout_ms);
  duration(f.lease_ttl, config.lease_ttl_ms);
  duration(f.leader_lease, config.leader_lease_ms);
}

// Signals arrive through a file descriptor the event loop polls.
int signal_descriptor() {
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
  return signal_fd;
}

// No Redis address: the broker runs its own (started after the signal mask
// is set, which its thread inherits; redis-server gets none of it). An exit
// code when it cannot.
std::expected<std::unique_ptr<dueq::broker::EmbeddedStore>, int> start_embedded_store(dueq::broker::BrokerConfig& config) {
  if (config.data_dir.empty()) {
    const std::string home = home_directory();
    if (home.empty()) {
      fmt::print(stderr, "dueq-broker: give --redis, or --data-dir for the embedded store (this user has no home directory)\n");
      return std::unexpected(2);
    }
    config.data_dir = home + "/.dueq";
  }
  auto store = std::make_unique<dueq::broker::EmbeddedStore>(config.data_dir);
  if (auto ok = store->start(); !ok) {
    spdlog::critical("{}", ok.error().message);
    return std::unexpected(ok.error().code == dueq::Errc::bad_argument ? 2 : 1);
  }
  config.redis_url = store->url();
  config.data_dir.clear();
  return store;
}

// A broker that is deposed (another took the lead while it was cut off or
// stopped) starts over as a fresh one, which stands by. Returns the exit code.
int serve(const dueq::broker::BrokerConfig& config, dueq::broker::Metrics& metrics,
          dueq::broker::AdminGateway& admin_gateway, int signal_fd) {
  using namespace dueq::broker;
  while (true) {
    Broker broker(config, metrics, admin_gateway);
    auto started = broker.start(signal_fd);
    if (!started) {
      spdlog::critical("{}", started.error().message);
      return 1;
    }
    if (*started == StartEnd::stopped) return 0;
    if (*started == StartEnd::deposed) continue;
    auto ended = broker.run(signal_fd);
    if (!ended) {
      spdlog::critical("{}", ended.error().message);
      return 1;
    }
    if (*ended == RunEnd::stopped) return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dueq;
  Flags flags;
  CLI::App app{"dueq-broker: the dueq coordinator (owns Redis, schedules, leases and dispatches jobs)"};
  app.set_version_flag("--version", dueq::version_text("dueq-broker"));
  add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);

  broker::BrokerConfig config;
  if (!flags.config_file.empty()) {
    if (auto ok = broker::load_config_file(flags.config_file, config); !ok) {
      fmt::print(stderr, "dueq-broker: {}\n", ok.error().message);
      return 2;
    }
  }
  apply_flags(flags, config);
  if (auto ok = setup_logging("broker", config.log_level); !ok) {
    fmt::print(stderr, "dueq-broker: {}\n", ok.error().message);
    return 2;
  }
  if (auto ok = broker::validate_config(config); !ok) {
    fmt::print(stderr, "dueq-broker: {}\n", ok.error().message);
    return 2;
  }
  const int signal_fd = signal_descriptor();
  std::unique_ptr<broker::EmbeddedStore> store;
  if (config.redis_url.empty()) {
    auto started = start_embedded_store(config);
    if (!started) return started.error();
    store = std::move(*started);
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
  return serve(config, metrics, admin_gateway, signal_fd);
}
