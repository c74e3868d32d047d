#include "broker/config/config.hpp"

#include <algorithm>
#include <array>
#include <arpa/inet.h>
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <functional>
#include <map>
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

// A duration key of [defaults] or [queues.NAME]: its field (in ms, or in s
// when `seconds`) and the least it may be.
struct DurationKey {
  const char* name;
  int64_t QueuePolicy::*field;
  int64_t least_ms;
  bool seconds;
};
constexpr std::array kDurationKeys{
    DurationKey{"backoff_base", &QueuePolicy::backoff_base_ms, 0, false},
    DurationKey{"backoff_cap", &QueuePolicy::backoff_cap_ms, 0, false},
    DurationKey{"done_retention", &QueuePolicy::done_retention_s, 0, true},
    DurationKey{"duplicate_window", &QueuePolicy::duplicate_window_ms, 1'000, false},
    DurationKey{"history_retention", &QueuePolicy::history_retention_s, 0, true},
    DurationKey{"max_run_time", &QueuePolicy::max_run_time_ms, 1'000, false},
};
// An integer key: its field and range.
struct IntegerKey {
  const char* name;
  int64_t QueuePolicy::*field;
  int64_t lo, hi;
};
constexpr std::array kIntegerKeys{
    IntegerKey{"done_max", &QueuePolicy::done_max, 1, 1'000'000'000},
    IntegerKey{"history_max", &QueuePolicy::history_max, 0, 1'000'000'000},
    IntegerKey{"max_backlog", &QueuePolicy::max_backlog, 0, INT64_MAX},
    IntegerKey{"max_snoozes", &QueuePolicy::max_snoozes, 0, 1'000'000},
    IntegerKey{"rate_burst", &QueuePolicy::rate_burst, 1, 1'000'000},
    IntegerKey{"concurrency_limit", &QueuePolicy::concurrency_limit, 0, 1'000'000},
    IntegerKey{"key_concurrency", &QueuePolicy::key_concurrency, 0, 1'000'000},
    IntegerKey{"key_rate_burst", &QueuePolicy::key_rate_burst, 1, 1'000'000},
};

// A rate as `dueq key rate` sends it: plain decimal, no trailing zeros.
std::string rate_text(double rate) {
  std::string text = fmt::format("{:.3f}", rate);
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

// `[queues.NAME.keys."KEY"]`: limit, rate and weight, each optional; at most
// 10,000 keys, as Redis holds (lua/key_limit.lua).
Result<void> read_key_settings(const toml::node& node, const std::string& full, QueuePolicy& policy) {
  auto table = node.as_table();
  if (!table) return bad_key(full, "expected a table of [" + full + ".\"KEY\"] tables");
  if (table->size() > 10'000) return bad_key(full, "at most 10000 keys");
  for (const auto& [k, settings_node] : *table) {
    const std::string key(k.str()), at = fmt::format("{}.\"{}\"", full, key);
    if (key.empty() || key.size() > 128) return bad_key(at, "a key is 1..128 bytes");
    auto settings = settings_node.as_table();
    if (!settings || settings->empty()) return bad_key(at, "expected a table of limit, rate and weight");
    QueuePolicy::KeySettings& out = policy.keys[key];
    for (const auto& [name, value] : *settings) {
      const std::string what(name.str()), where = fmt::format("{}.{}", at, what);
      if (what == "limit" || what == "weight") {
        auto v = read_int(value, where, 1, what == "limit" ? 1'000'000 : 1'000);
        if (!v) return std::unexpected(v.error());
        (what == "limit" ? out.limit : out.weight) = std::to_string(*v);
      } else if (what == "rate") {
        auto v = value.value<double>();
        if (!v || !(*v >= 0.001 && *v <= 1'000'000)) return bad_key(where, "expected jobs per second in 0.001..1000000");
        out.rate = rate_text(*v);
      } else {
        return bad_key(where, "unknown key (known: limit, rate, weight)");
      }
    }
  }
  return {};
}

Result<void> read_policy_key(const std::string& key, const std::string& full, const toml::node& node, QueuePolicy& policy) {
  for (const auto& d : kDurationKeys) {
    if (key != d.name) continue;
    auto v = read_duration(node, full, d.least_ms);
    if (!v) return std::unexpected(v.error());
    policy.*d.field = d.seconds ? *v / 1000 : *v;
    return {};
  }
  for (const auto& i : kIntegerKeys) {
    if (key != i.name) continue;
    auto v = read_int(node, full, i.lo, i.hi);
    if (!v) return std::unexpected(v.error());
    policy.*i.field = *v;
    return {};
  }
  if (key == "max_attempts") {
    auto v = read_int(node, full, 1, 1000);
    if (!v) return std::unexpected(v.error());
    policy.max_attempts = static_cast<uint32_t>(*v);
  } else if (key == "rate_limit" || key == "key_rate") {
    // Jobs per second: an integer, or a decimal for fewer than one.
    auto v = node.value<double>();
    if (!v || !(*v >= 0 && *v <= 1'000'000)) return bad_key(full, "expected jobs per second in 0..1000000 (0 = none)");
    (key == "rate_limit" ? policy.rate_limit : policy.key_rate) = *v;
  } else if (key == "keys" && !full.starts_with("defaults.")) {
    return read_key_settings(node, full, policy);
  } else if (key == "ordered" || key == "fair") {
    auto v = node.value_exact<bool>();
    if (!v) return bad_key(full, "expected true or false");
    (key == "ordered" ? policy.ordered : policy.fair) = *v;
  } else {
    return bad_key(full, "unknown key (known: max_attempts, backoff_base, backoff_cap, done_retention, done_max, "
                         "duplicate_window, history_retention, history_max, max_backlog, max_snoozes, max_run_time, rate_limit, "
                         "rate_burst, concurrency_limit, key_concurrency, key_rate, key_rate_burst, ordered, fair, and in "
                         "[queues.NAME] keys)");
  }
  return {};
}

Result<void> read_policy(const toml::table& table, const std::string& prefix, QueuePolicy& policy) {
  for (const auto& [k, node] : table)
    if (auto ok = read_policy_key(std::string(k.str()), prefix + std::string(k.str()), node, policy); !ok) return ok;
  if (policy.backoff_cap_ms < policy.backoff_base_ms) return bad_key(prefix + "backoff_cap", "must not be below backoff_base");
  // A fair queue lines a key's jobs up as they come due or arrive, not by
  // due time, so it cannot keep an ordered queue's promise.
  if (policy.fair && policy.ordered) return bad_key(prefix + "fair", "cannot be set with ordered = true");
  if (policy.duplicate_window_ms > policy.done_retention_s * 1000)
    return bad_key(prefix + "duplicate_window", "must not be longer than done_retention (ids are kept that long at most)");
  // Set here, history is checked against done_retention and done_max; left
  // to its default (or to [defaults]), it is cut to fit them.
  if (!table.contains("history_retention")) policy.history_retention_s = std::min(policy.history_retention_s, policy.done_retention_s);
  if (!table.contains("history_max")) policy.history_max = std::min(policy.history_max, policy.done_max);
  if (policy.history_retention_s > policy.done_retention_s)
    return bad_key(prefix + "history_retention", "must not be longer than done_retention (a document is kept with its id)");
  if (policy.history_max > policy.done_max)
    return bad_key(prefix + "history_max", "must not be above done_max (a document is kept with its id)");
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

// How one top-level key is read into the config; every value is checked.
using KeyReader = std::function<Result<void>(const toml::node& node, const std::string& key, BrokerConfig& config)>;

KeyReader text(std::string BrokerConfig::*field, const char* expected, bool non_empty = false) {
  return [=](const toml::node& node, const std::string& key, BrokerConfig& config) -> Result<void> {
    auto v = node.value<std::string>();
    if (!v || (non_empty && v->empty())) return bad_key(key, expected);
    config.*field = *v;
    return {};
  };
}

KeyReader flag(bool BrokerConfig::*field) {
  return [=](const toml::node& node, const std::string& key, BrokerConfig& config) -> Result<void> {
    auto v = node.value<bool>();
    if (!v) return bad_key(key, "expected true or false");
    config.*field = *v;
    return {};
  };
}

KeyReader duration(int64_t BrokerConfig::*field, int64_t min_ms) {
  return [=](const toml::node& node, const std::string& key, BrokerConfig& config) -> Result<void> {
    auto v = read_duration(node, key, min_ms);
    if (!v) return std::unexpected(v.error());
    config.*field = *v;
    return {};
  };
}

KeyReader integer(int BrokerConfig::*field, int64_t lo, int64_t hi) {
  return [=](const toml::node& node, const std::string& key, BrokerConfig& config) -> Result<void> {
    auto v = read_int(node, key, lo, hi);
    if (!v) return std::unexpected(v.error());
    config.*field = static_cast<int>(*v);
    return {};
  };
}

// A text value that must also pass `check` (an error message, or "").
KeyReader checked_text(std::string BrokerConfig::*field, const char* expected,
                       const std::function<std::string(const std::string&)>& check) {
  return [=](const toml::node& node, const std::string& key, BrokerConfig& config) -> Result<void> {
    auto v = node.value<std::string>();
    if (!v) return bad_key(key, expected);
    if (const std::string why = check(*v); !why.empty()) return bad_key(key, why);
    config.*field = *v;
    return {};
  };
}

Result<void> read_defaults(const toml::node& node, const std::string& key, BrokerConfig& config) {
  auto table = node.as_table();
  if (!table) return bad_key(key, "expected a table");
  return read_policy(*table, "defaults.", config.default_policy);
}

Result<void> read_queues(const toml::node& node, const std::string& key, BrokerConfig& config) {
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
  return {};
}

Result<void> read_cron(const toml::node& node, const std::string& key, BrokerConfig& config) {
  auto table = node.as_table();
  if (!table) return bad_key(key, "expected a table of [cron.NAME] tables");
  for (const auto& [ck, cnode] : *table) {
    const std::string name(ck.str());
    auto entry = read_cron_entry(cnode, name);
    if (!entry) return std::unexpected(entry.error());
    if (config.cron.size() >= kMaxCronEntries) return bad_key("cron", fmt::format("more than {} entries", kMaxCronEntries));
    config.cron.push_back(std::move(*entry));
  }
  return {};
}

Result<void> read_cron_lookahead(const toml::node& node, const std::string& key, BrokerConfig& config) {
  if (auto ok = duration(&BrokerConfig::cron_lookahead_ms, 1'000)(node, key, config); !ok) return ok;
  if (config.cron_lookahead_ms > 3'600'000) return bad_key(key, "must be at most 1h");
  return {};
}

Result<void> removed_max_unconfirmed(const toml::node&, const std::string& key, BrokerConfig&) {
  return bad_key(key, "was removed: a delivery whose start no worker announced never uses an attempt, and its next "
                      "worker announces the start first (docs/protocol.md 3.3); delete the line");
}

// Every top-level key of the config file, and how it is read.
const std::map<std::string_view, KeyReader, std::less<>>& config_keys() {
  using C = BrokerConfig;
  static const std::map<std::string_view, KeyReader, std::less<>> keys = {
      {"redis", text(&C::redis_url, "expected a string")},
      {"http", checked_text(&C::http, "expected \"[host]:port\"", [](const std::string& v) {
         auto ok = parse_http_address(v);
         return ok ? std::string() : ok.error().message;
       })},
      {"dashboard_token_file", text(&C::dashboard_token_file, "expected a path", true)},
      {"data_dir", text(&C::data_dir, "expected a path", true)},
      {"listen", text(&C::listen, "expected a string")},
      {"log_level", text(&C::log_level, "expected a string")},
      {"curve_key", text(&C::curve_key, "expected a path", true)},
      {"allow_list", text(&C::allow_list, "expected a path", true)},
      {"insecure", flag(&C::insecure)},
      {"advertise", checked_text(&C::advertise, "expected a tcp:// endpoint of at most 256 bytes", [](const std::string& v) {
         return v.size() > 256 || v.find(' ') != std::string::npos || !v.starts_with("tcp://")
                    ? std::string("expected a tcp:// endpoint of at most 256 bytes")
                    : std::string();
       })},
      {"allow_unsafe_redis", flag(&C::allow_unsafe_redis)},
      {"heartbeat", duration(&C::heartbeat_ms, 50)},
      {"worker_timeout", duration(&C::worker_timeout_ms, 100)},
      {"delivery_timeout", duration(&C::delivery_timeout_ms, 100)},
      {"lease_ttl", duration(&C::lease_ttl_ms, 1000)},
      {"leader_lease", duration(&C::leader_lease_ms, 500)},
      {"lease_batch", integer(&C::lease_batch, 1, 1000)},
      {"promote_batch", integer(&C::promote_batch, 1, 5000)},
      {"reclaim_batch", integer(&C::reclaim_batch, 1, 5000)},
      {"max_worker_capacity", integer(&C::max_worker_capacity, 1, proto::kMaxWorkerCapacity)},
      {"max_queues", integer(&C::max_queues, 1, 100'000)},
      {"max_unread_mib", integer(&C::max_unread_mib, 1, 4'096)},
      {"max_unconfirmed_deliveries", removed_max_unconfirmed},
      {"min_replicas", integer(&C::min_replicas, 0, 100)},
      {"replica_timeout", duration(&C::replica_timeout_ms, 1)},
      {"reconcile_interval", duration(&C::reconcile_interval_ms, 0)},
      {"cron_lookahead", read_cron_lookahead},
      {"defaults", read_defaults},
      {"queues", read_queues},
      {"cron", read_cron},
  };
  return keys;
}

Result<void> apply_config_table(const toml::table& root, BrokerConfig& config) {
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    const auto& keys = config_keys();
    const auto reader = keys.find(key);
    if (reader == keys.end()) return bad_key(key, "unknown key");
    if (auto ok = reader->second(node, key, config); !ok) return ok;
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
