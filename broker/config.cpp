#include "broker/config.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <set>
#include <toml++/toml.h>

#include "common/duration.hpp"
#include "common/names.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

namespace {

std::unexpected<Error> bad_key(const std::string& key, const std::string& why) {
  return fail(Errc::bad_argument, fmt::format("config key '{}': {}", key, why));
}

// Durations are strings with a unit ("30s"); a bare integer is refused
// like a unitless string, but for 0.
Result<int64_t> read_duration(const toml::node& node, const std::string& key, int64_t min_ms) {
  int64_t ms = 0;
  if (auto s = node.value<std::string>()) {
    auto parsed = parse_duration_ms(*s);
    if (!parsed) return bad_key(key, parsed.error().message);
    ms = *parsed;
  } else if (auto i = node.value_exact<int64_t>(); i && *i == 0) {
    ms = 0;
  } else {
    return bad_key(key, "expected a duration with a unit (ms, s, m, h or d) such as \"30s\"");
  }
  if (ms < min_ms) return bad_key(key, fmt::format("must be at least {} ms", min_ms));
  return ms;
}

Result<int64_t> read_int(const toml::node& node, const std::string& key, int64_t lo, int64_t hi) {
  auto v = node.value_exact<int64_t>();
  if (!v || *v < lo || *v > hi) return bad_key(key, fmt::format("expected an integer in {}..{}", lo, hi));
  return *v;
}

Result<void> read_policy(const toml::table& table, const std::string& prefix, QueuePolicy& policy) {
  for (const auto& [k, node] : table) {
    const std::string key(k.str());
    const std::string full = prefix + key;
    if (key == "max_attempts") {
      auto v = read_int(node, full, 1, 1000);
      if (!v) return std::unexpected(v.error());
      policy.max_attempts = static_cast<uint32_t>(*v);
    } else if (key == "backoff_base") {
      auto v = read_duration(node, full, 0);
      if (!v) return std::unexpected(v.error());
      policy.backoff_base_ms = *v;
    } else if (key == "backoff_cap") {
      auto v = read_duration(node, full, 0);
      if (!v) return std::unexpected(v.error());
      policy.backoff_cap_ms = *v;
    } else if (key == "done_retention") {
      auto v = read_duration(node, full, 0);
      if (!v) return std::unexpected(v.error());
      policy.done_retention_s = *v / 1000;
    } else if (key == "done_max") {
      auto v = read_int(node, full, 1, 1'000'000'000);
      if (!v) return std::unexpected(v.error());
      policy.done_max = *v;
    } else if (key == "duplicate_window") {
      auto v = read_duration(node, full, 1'000);
      if (!v) return std::unexpected(v.error());
      policy.duplicate_window_ms = *v;
    } else if (key == "max_backlog") {
      auto v = read_int(node, full, 0, INT64_MAX);
      if (!v) return std::unexpected(v.error());
      policy.max_backlog = *v;
    } else if (key == "max_run_time") {
      auto v = read_duration(node, full, 1'000);
      if (!v) return std::unexpected(v.error());
      policy.max_run_time_ms = *v;
    } else if (key == "rate_limit") {
      // Jobs per second: an integer, or a decimal for fewer than one.
      auto v = node.value<double>();
      if (!v || !(*v >= 0 && *v <= 1'000'000)) return bad_key(full, "expected jobs per second in 0..1000000 (0 = none)");
      policy.rate_limit = *v;
    } else if (key == "rate_burst") {
      auto v = read_int(node, full, 1, 1'000'000);
      if (!v) return std::unexpected(v.error());
      policy.rate_burst = *v;
    } else if (key == "concurrency_limit") {
      auto v = read_int(node, full, 0, 1'000'000);
      if (!v) return std::unexpected(v.error());
      policy.concurrency_limit = *v;
    } else {
      return bad_key(full, "unknown key (known: max_attempts, backoff_base, backoff_cap, done_retention, done_max, "
                           "duplicate_window, max_backlog, max_run_time, rate_limit, rate_burst, concurrency_limit)");
    }
  }
  if (policy.backoff_cap_ms < policy.backoff_base_ms) return bad_key(prefix + "backoff_cap", "must not be below backoff_base");
  if (policy.duplicate_window_ms > policy.done_retention_s * 1000)
    return bad_key(prefix + "duplicate_window", "must not be longer than done_retention (ids are kept that long at most)");
  return {};
}

// [cron.NAME]: schedule, time_zone, queue, type, payload, misfire, max_attempts.
Result<CronEntry> read_cron_entry(const toml::node& node, const std::string& name) {
  const std::string prefix = "cron." + name + ".";
  auto table = node.as_table();
  if (!table) return bad_key("cron." + name, "expected a table");
  CronDefinition d;
  for (const auto& [k, value] : *table) {
    const std::string key(k.str());
    std::string* text = key == "schedule" ? &d.schedule : key == "time_zone" ? &d.time_zone : key == "queue" ? &d.queue
                      : key == "type" ? &d.type : key == "payload" ? &d.payload : key == "misfire" ? &d.misfire : nullptr;
    if (text != nullptr) {
      auto v = value.value_exact<std::string>();
      if (!v) return bad_key(prefix + key, "expected a string");
      *text = *v;
    } else if (key == "max_attempts") {
      auto v = read_int(value, prefix + key, 1, 1000);
      if (!v) return std::unexpected(v.error());
      d.max_attempts = static_cast<uint32_t>(*v);
    } else {
      return bad_key(prefix + key, "unknown key (known: schedule, time_zone, queue, type, payload, misfire, max_attempts)");
    }
  }
  auto entry = make_cron_entry(name, d);
  if (!entry) return bad_key("cron." + name, entry.error().message);
  entry->from_config = true;
  return entry;
}

Result<void> apply_config_table(const toml::table& root, BrokerConfig& config) {
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    auto set_duration = [&](int64_t& target, int64_t min_ms) -> Result<void> {
      auto v = read_duration(node, key, min_ms);
      if (!v) return std::unexpected(v.error());
      target = *v;
      return {};
    };
    auto set_int = [&](int& target, int64_t lo, int64_t hi) -> Result<void> {
      auto v = read_int(node, key, lo, hi);
      if (!v) return std::unexpected(v.error());
      target = static_cast<int>(*v);
      return {};
    };
    Result<void> ok;
    if (key == "redis") {
      auto v = node.value<std::string>();
      if (!v) return bad_key(key, "expected a string");
      config.redis_url = *v;
    } else if (key == "http") {
      auto v = node.value<std::string>();
      if (!v) return bad_key(key, "expected \"[host]:port\"");
      if (auto ok = parse_http_address(*v); !ok) return bad_key(key, ok.error().message);
      config.http = *v;
    } else if (key == "dashboard_token_file") {
      auto v = node.value<std::string>();
      if (!v || v->empty()) return bad_key(key, "expected a path");
      config.dashboard_token_file = *v;
    } else if (key == "data_dir") {
      auto v = node.value<std::string>();
      if (!v || v->empty()) return bad_key(key, "expected a path");
      config.data_dir = *v;
    } else if (key == "listen") {
      auto v = node.value<std::string>();
      if (!v) return bad_key(key, "expected a string");
      config.listen = *v;
    } else if (key == "log_level") {
      auto v = node.value<std::string>();
      if (!v) return bad_key(key, "expected a string");
      config.log_level = *v;
    } else if (key == "curve_key" || key == "allow_list") {
      auto v = node.value<std::string>();
      if (!v || v->empty()) return bad_key(key, "expected a path");
      (key == "curve_key" ? config.curve_key : config.allow_list) = *v;
    } else if (key == "insecure") {
      auto v = node.value<bool>();
      if (!v) return bad_key(key, "expected true or false");
      config.insecure = *v;
    } else if (key == "advertise") {
      auto v = node.value<std::string>();
      if (!v || v->size() > 256 || v->find(' ') != std::string::npos || !v->starts_with("tcp://"))
        return bad_key(key, "expected a tcp:// endpoint of at most 256 bytes");
      config.advertise = *v;
    } else if (key == "allow_unsafe_redis") {
      auto v = node.value<bool>();
      if (!v) return bad_key(key, "expected true or false");
      config.allow_unsafe_redis = *v;
    } else if (key == "heartbeat") ok = set_duration(config.heartbeat_ms, 50);
    else if (key == "worker_timeout") ok = set_duration(config.worker_timeout_ms, 100);
    else if (key == "delivery_timeout") ok = set_duration(config.delivery_timeout_ms, 100);
    else if (key == "lease_ttl") ok = set_duration(config.lease_ttl_ms, 1000);
    else if (key == "leader_lease") ok = set_duration(config.leader_lease_ms, 500);
    else if (key == "lease_batch") ok = set_int(config.lease_batch, 1, 1000);
    else if (key == "promote_batch") ok = set_int(config.promote_batch, 1, 5000);
    else if (key == "reclaim_batch") ok = set_int(config.reclaim_batch, 1, 5000);
    else if (key == "max_worker_capacity") ok = set_int(config.max_worker_capacity, 1, proto::kMaxWorkerCapacity);
    else if (key == "max_queues") ok = set_int(config.max_queues, 1, 100'000);
    else if (key == "max_unread_mib") ok = set_int(config.max_unread_mib, 1, 4'096);
    else if (key == "max_unconfirmed_deliveries")
      return bad_key(key, "was removed: a delivery whose start no worker announced never uses an attempt, and its "
                          "next worker announces the start first (docs/protocol.md 3.3); delete the line");
    else if (key == "min_replicas") ok = set_int(config.min_replicas, 0, 100);
    else if (key == "replica_timeout") ok = set_duration(config.replica_timeout_ms, 1);
    else if (key == "reconcile_interval") ok = set_duration(config.reconcile_interval_ms, 0);
    else if (key == "cron_lookahead") {
      ok = set_duration(config.cron_lookahead_ms, 1'000);
      if (ok && config.cron_lookahead_ms > 3'600'000) return bad_key(key, "must be at most 1h");
    }
    else if (key == "defaults") {
      auto table = node.as_table();
      if (!table) return bad_key(key, "expected a table");
      ok = read_policy(*table, "defaults.", config.default_policy);
    } else if (key == "queues") {
      auto table = node.as_table();
      if (!table) return bad_key(key, "expected a table of [queues.NAME] tables");
      for (const auto& [qk, qnode] : *table) {
        const std::string queue(qk.str());
        if (auto valid = validate_queue_name(queue); !valid) return bad_key("queues." + queue, valid.error().message);
        auto qtable = qnode.as_table();
        if (!qtable) return bad_key("queues." + queue, "expected a table");
        QueuePolicy policy = config.default_policy;
        if (auto r = read_policy(*qtable, "queues." + queue + ".", policy); !r) return r;
        config.queues[queue] = policy;
      }
    } else if (key == "cron") {
      auto table = node.as_table();
      if (!table) return bad_key(key, "expected a table of [cron.NAME] tables");
      for (const auto& [ck, cnode] : *table) {
        const std::string name(ck.str());
        auto entry = read_cron_entry(cnode, name);
        if (!entry) return std::unexpected(entry.error());
        if (config.cron.size() >= kMaxCronEntries) return bad_key("cron", fmt::format("more than {} entries", kMaxCronEntries));
        config.cron.push_back(std::move(*entry));
      }
    } else {
      return bad_key(key, "unknown key");
    }
    if (!ok) return ok;
  }
  return {};
}

std::unexpected<Error> parse_failure(std::string_view source, const toml::parse_error& e) {
  return fail(Errc::bad_argument, fmt::format("config file {}: {} (line {})", source, e.description(), e.source().begin.line));
}

}  // namespace

Result<void> load_config_file(const std::string& path, BrokerConfig& config) {
  try {
    return apply_config_table(toml::parse_file(path), config);
  } catch (const toml::parse_error& e) {
    return parse_failure(path, e);
  }
}

Result<void> load_config_text(std::string_view text, std::string_view source, BrokerConfig& config) {
  try {
    return apply_config_table(toml::parse(text, source), config);
  } catch (const toml::parse_error& e) {
    return parse_failure(source, e);
  }
}

bool is_local_endpoint(const std::string& endpoint) {
  if (endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://")) return true;
  if (!endpoint.starts_with("tcp://")) return false;
  const std::string_view rest = std::string_view(endpoint).substr(6);
  const auto colon = rest.rfind(':');
  if (colon == std::string_view::npos) return false;
  const std::string host(rest.substr(0, colon));
  if (host == "localhost" || host == "[::1]") return true;
  in_addr address{};
  return ::inet_pton(AF_INET, host.c_str(), &address) == 1 && (ntohl(address.s_addr) >> 24) == 127;
}

Result<std::pair<std::string, int>> parse_http_address(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || address.size() > 256)
    return fail(Errc::bad_argument, "expected [host]:port, e.g. 127.0.0.1:9600 or :9600");
  std::string host(address.substr(0, colon));
  const std::string_view port_text = address.substr(colon + 1);
  int port = -1;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 || port > 65535)
    return fail(Errc::bad_argument, fmt::format("bad port in '{}': expected 0..65535", address));
  if (host.empty()) host = "127.0.0.1";
  for (char ch : host)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-' && ch != ':' && ch != '[' && ch != ']')
      return fail(Errc::bad_argument, fmt::format("bad host in '{}'", address));
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::pair{host, port};
}

Result<void> validate_config(const BrokerConfig& c) {
  if (!c.http.empty())
    if (auto ok = parse_http_address(c.http); !ok) return fail(Errc::bad_argument, "http: " + ok.error().message);
  if (!c.redis_url.empty() && !c.data_dir.empty())
    return fail(Errc::bad_argument, "give either a Redis address (redis, --redis) or a data_dir (--data-dir) for the "
                                    "embedded store, not both");
  if (c.curve_key.empty() != c.allow_list.empty())
    return fail(Errc::bad_argument, "CURVE needs both curve_key (--curve-key) and allow_list (--allow-list)");
  if (c.curve_key.empty() && !c.insecure && !is_local_endpoint(c.listen))
    return fail(Errc::bad_argument,
                fmt::format("refusing to listen on {} without CURVE: anyone who reaches it could enqueue, take and "
                            "purge jobs. Give --curve-key and --allow-list (docs/security.md), listen on loopback or "
                            "ipc, or pass --insecure on a network you trust",
                            c.listen));
  if (c.worker_timeout_ms < 2 * c.heartbeat_ms)
    return fail(Errc::bad_argument, "worker_timeout must be at least twice the heartbeat interval");
  if (c.delivery_timeout_ms < c.heartbeat_ms * 2)
    return fail(Errc::bad_argument, "delivery_timeout must be at least twice the heartbeat interval");
  if (c.lease_ttl_ms < c.worker_timeout_ms * 2)
    return fail(Errc::bad_argument, "lease_ttl must be at least twice worker_timeout");
  if (c.leader_lease_ms < 500 || c.leader_lease_ms > 600'000)
    return fail(Errc::bad_argument, "leader_lease must be between 500ms and 10m");
  if (!c.advertise.empty() &&
      (c.advertise.size() > 256 || c.advertise.find(' ') != std::string::npos || !c.advertise.starts_with("tcp://")))
    return fail(Errc::bad_argument, "advertise must be a tcp:// endpoint of at most 256 bytes");
  return {};
}

}  // namespace dueq::broker
