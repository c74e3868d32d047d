#include "broker/loop/access.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "common/names.hpp"

namespace dueq::broker {

namespace {
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";  // fixed by ZAP (RFC 27)
constexpr int kZapRequestsPerTurn = 256;

std::unexpected<Error> bad_entry(const std::string& path, size_t index, const std::string& why) {
  return fail(Errc::bad_argument, fmt::format("allow-list {}: key #{}: {}", path, index + 1, why));
}
}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::worker: return "worker";
    case Role::producer: return "producer";
    case Role::admin: return "admin";
  }
  return "?";
}

std::string Grant::label() const { return fmt::format("key '{}' ({})", name, role_name(role)); }

std::string key_id(const std::string& public_z85) { return public_z85.substr(0, 8); }

Result<AllowList> AllowList::load(const std::string& path) {
  AllowList list;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(path, ec))
      if (entry.is_regular_file() && entry.path().extension() == ".toml") files.push_back(entry.path().string());
    if (ec) return fail(Errc::bad_argument, fmt::format("allow-list {}: {}", path, ec.message()));
    std::sort(files.begin(), files.end());
    for (const auto& file : files)
      if (auto ok = list.read_file(file); !ok) return std::unexpected(ok.error());
  } else if (auto ok = list.read_file(path); !ok) {
    return std::unexpected(ok.error());
  }
  return list;
}

namespace {

// A [[key]] table's `queues` into `grant`: names, or ["*"] for every queue.
// The error text, "" when it is good.
std::string read_grant_queues(const toml::node& value, Grant& grant) {
  const toml::array* queues = value.as_array();
  if (queues == nullptr) return "'queues' must be a list of queue names, or [\"*\"]";
  for (const auto& q : *queues) {
    auto name = q.value<std::string>();
    if (!name) return "'queues' must hold strings";
    if (*name == "*") {
      grant.all_queues = true;
      continue;
    }
    if (auto valid = validate_queue_name(*name); !valid) return valid.error().message;
    grant.queues.insert(*name);
  }
  return {};
}

// One field of a [[key]] table into `grant` (its key into `public_key`).
// The error text, "" when it is good.
std::string read_grant_field(const std::string& field, const toml::node& value, Grant& grant, std::string& public_key) {
  if (field == "name") {
    auto v = value.value<std::string>();
    if (!v || v->empty() || v->size() > 64 || loggable(*v) != *v) return "'name' must be 1-64 printable characters";
    grant.name = *v;
  } else if (field == "public") {
    auto v = value.value<std::string>();
    if (!v || !is_z85_key(*v)) return "'public' must be a 40-character Z85 key (the .pub file of dueq keygen)";
    public_key = *v;
  } else if (field == "role") {
    auto v = value.value<std::string>();
    if (v == "worker") grant.role = Role::worker;
    else if (v == "producer") grant.role = Role::producer;
    else if (v == "admin") grant.role = Role::admin;
    else return "'role' must be worker, producer or admin";
  } else if (field == "queues") {
    return read_grant_queues(value, grant);
  } else if (field == "capacity") {
    auto v = value.value_exact<int64_t>();
    if (!v || *v < 1 || *v > 1'000'000) return "'capacity' must be an integer 1..1000000";
    grant.capacity = static_cast<uint32_t>(*v);
  } else {
    return fmt::format("unknown field '{}' (known: name, public, role, queues, capacity)", loggable(field));
  }
  return {};
}

}  // namespace

Result<void> AllowList::read_file(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return fail(Errc::bad_argument, fmt::format("allow-list {}: {} (line {})", path, e.description(), e.source().begin.line));
  }
  for (const auto& [k, node] : root)
    if (k.str() != "key") return fail(Errc::bad_argument, fmt::format("allow-list {}: unknown key '{}' (expected [[key]] tables)", path, k.str()));
  const toml::array* keys = root["key"].as_array();
  if (keys == nullptr) return {};
  for (size_t i = 0; i < keys->size(); ++i) {
    const toml::table* entry = (*keys)[i].as_table();
    if (entry == nullptr) return bad_entry(path, i, "expected a [[key]] table");
    Grant grant;
    std::string public_key;
    for (const auto& [fk, value] : *entry)
      if (const std::string why = read_grant_field(std::string(fk.str()), value, grant, public_key); !why.empty())
        return bad_entry(path, i, why);
    if (grant.name.empty() || public_key.empty() || !entry->contains("role"))
      return bad_entry(path, i, "'name', 'public' and 'role' are required");
    if (grant.role == Role::admin) grant.all_queues = true;
    if (!grant.all_queues && grant.queues.empty()) return bad_entry(path, i, "'queues' is required (or [\"*\"])");
    if (grant.capacity != 0 && grant.role != Role::worker) return bad_entry(path, i, "'capacity' is for worker keys");
    if (by_name_.contains(grant.name)) return bad_entry(path, i, fmt::format("the name '{}' is used twice", grant.name));
    if (name_of_key_.contains(public_key)) return bad_entry(path, i, fmt::format("key {} is listed twice", key_id(public_key)));
    name_of_key_[public_key] = grant.name;
    by_name_[grant.name] = std::move(grant);
  }
  return {};
}

const Grant* AllowList::by_key(const std::string& public_z85) const {
  auto it = name_of_key_.find(public_z85);
  return it == name_of_key_.end() ? nullptr : by_name(it->second);
}

const Grant* AllowList::by_name(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

Result<void> Access::start_zap(zmq::socket_t& router) {
  zap_ = zmq::socket_t(context_, zmq::socket_type::rep);
  zap_.set(zmq::sockopt::linger, 0);
  try {
    zap_.bind(kZapEndpoint);
    // A domain makes libzmq ask the handler about NULL (plaintext) sessions too.
    router.set(zmq::sockopt::zap_domain, "dueq");
  } catch (const zmq::error_t& e) {
    return fail(Errc::internal, fmt::format("cannot start the ZAP handler: {}", e.what()));
  }
  return {};
}

Result<void> Access::enable(zmq::socket_t& router, const CurveKeyPair& broker_keys, const std::string& allow_list) {
  auto list = AllowList::load(allow_list);
  if (!list) return std::unexpected(list.error());
  allow_list_ = std::move(*list);
  allow_list_path_ = allow_list;
  try {
    router.set(zmq::sockopt::curve_server, 1);
    router.set(zmq::sockopt::curve_secretkey, broker_keys.secret_key);
  } catch (const zmq::error_t& e) {
    return fail(Errc::internal, fmt::format("cannot turn CURVE on: {}", e.what()));
  }
  curve_ = true;
  spdlog::info("CURVE on: {} keys on the allow-list {}", allow_list_.size(), allow_list_path_);
  return {};
}

void Access::answer_zap(int64_t now_ms, ConnectionGate& gate) {
  for (int n = 0; n < kZapRequestsPerTurn; ++n) {
    std::vector<zmq::message_t> request;
    zmq::message_t part;
    if (!zap_.recv(part, zmq::recv_flags::dontwait)) return;
    request.push_back(std::move(part));
    while (request.back().more() && request.size() < 16) {
      zmq::message_t next;
      (void)zap_.recv(next);
      request.push_back(std::move(next));
    }
    for (bool more = request.back().more(); more; more = part.more()) (void)zap_.recv(part);  // forged: drop the rest
    // version, request id, domain, address, routing id, mechanism, credentials
    std::string status = "400", text = "key not allowed", user_id;
    const std::string request_id = request.size() > 1 ? request[1].to_string() : "";
    if (!gate.admitting()) {
      // 500, not 300 (temporary): libzmq sends no ERROR command for a 300
      // and keeps the connection, and its descriptor, until the handshake
      // times out. Not 400 either: the peer's client would report its key
      // refused. A 500 reaches it as the broker at its limit (LinkEvents).
      status = "500";
      text = "at the open-file limit: try again later";
      gate.turned_away();
    } else if (!curve_ && request.size() == 6 && request[0].to_string_view() == "1.0" &&
               request[5].to_string_view() == "NULL") {
      status = "200";
      text = "OK";
    } else if (request.size() == 7 && request[0].to_string_view() == "1.0" && request[5].to_string_view() == "CURVE" &&
        request[6].size() == 32) {
      char z85[41] = {};
      zmq_z85_encode(z85, static_cast<const uint8_t*>(request[6].data()), 32);
      if (allow_list_.by_key(z85) != nullptr) {
        status = "200";
        text = "OK";
        // The key itself, not its name: a reload that lists the name with
        // another key must find no grant for this session's frames.
        user_id = z85;
      } else {
        refused(fmt::format("key {} from {}", key_id(z85), loggable(request[3].to_string_view())), "connection", now_ms);
      }
    }
    std::array<std::string, 6> reply = {"1.0", request_id, status, text, user_id, ""};
    for (size_t i = 0; i < reply.size(); ++i)
      zap_.send(zmq::buffer(reply[i]), i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

void Access::reload() {
  if (!enabled()) {
    spdlog::info("SIGHUP: no allow-list to reload (CURVE is off)");
    return;
  }
  auto list = AllowList::load(allow_list_path_);
  if (!list) {
    spdlog::error("SIGHUP: keeping the allow-list as it was: {}", list.error().message);
    return;
  }
  allow_list_ = std::move(*list);
  spdlog::info("SIGHUP: allow-list {} reloaded, {} keys", allow_list_path_, allow_list_.size());
}

void Access::refused(const std::string& who, const std::string& what, int64_t now_ms) {
  ++refusals_;
  if (auto held_back = refusal_log_.admit(who, now_ms))
    spdlog::warn("refused {} from {} ({} refusals in total, {} lines about it held back)", what, who, refusals_, *held_back);
}

}  // namespace dueq::broker
