#pragma once
// Access: who may do what on the broker socket (docs/security.md). With
// CURVE on, the broker's ZAP handler admits only keys on the allow-list, and
// every frame is checked against its sender's grant (role, queues, capacity)
// as the allow-list stands at that moment: a key that a reload (SIGHUP)
// removes loses access at its next frame, without a reconnect; keys still
// listed keep their connections. Logs name keys by their allow-list name or
// a short key id, never a whole key.
#include <zmq.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>

#include "broker/loop/connection_gate.hpp"
#include "common/curve.hpp"
#include "common/error.hpp"
#include "common/logging.hpp"

namespace dueq::broker {

enum class Role { worker, producer, admin };
const char* role_name(Role role);

struct Grant {
  std::string name;  // the key's name in the allow-list
  Role role = Role::producer;
  bool all_queues = false;        // queues = ["*"]
  std::set<std::string> queues;
  uint32_t capacity = 0;          // worker: the most jobs it is sent at once (0: max_worker_capacity)
  bool may_use(const std::string& queue) const { return all_queues || queues.contains(queue); }
  // How log lines name the key: "key 'mailer-1' (worker)".
  std::string label() const;
};

// The allow-list: a TOML file, or a directory whose *.toml files are read
// in name order, each holding [[key]] tables:
//   [[key]]
//   name = "mailer-1"           # shown in logs instead of the key
//   public = "<40 Z85 chars>"   # from `dueq keygen` (the .pub file)
//   role = "worker"             # worker, producer or admin
//   queues = ["emails"]         # or ["*"]; admin keys use every queue
//   capacity = 64               # worker only, optional
class AllowList {
 public:
  static Result<AllowList> load(const std::string& path);
  const Grant* by_key(const std::string& public_z85) const;
  const Grant* by_name(const std::string& name) const;
  size_t size() const { return by_name_.size(); }

 private:
  Result<void> read_file(const std::string& path);
  // Every frame looks its sender's grant up by key (its User-Id).
  std::unordered_map<std::string, Grant> by_name_;
  std::unordered_map<std::string, std::string> name_of_key_;
};

// A short, public id for a key in log lines: its first 8 Z85 characters.
std::string key_id(const std::string& public_z85);

class Access {
 public:
  // Plaintext until enable(): every peer may do everything.
  explicit Access(zmq::context_t& context) : context_(context) {}

  // Starts the ZAP handler for `router` (call before it binds): every new
  // session, plaintext too, is admitted or turned away by answer_zap.
  Result<void> start_zap(zmq::socket_t& router);
  // Turns CURVE on for `router` (call after start_zap, before it binds) with
  // the broker's pair and the allow-list at `allow_list`.
  Result<void> enable(zmq::socket_t& router, const CurveKeyPair& broker_keys, const std::string& allow_list);
  bool enabled() const { return curve_; }

  // The ZAP socket to poll for ZMQ_POLLIN.
  void* zap_handle() { return zap_.handle(); }
  // Answers the waiting ZAP requests, a bounded number per call: a key on
  // the allow-list under CURVE, anyone in plaintext, and no one while the
  // gate turns new sessions away.
  void answer_zap(int64_t now_ms, ConnectionGate& gate);
  // Reads the allow-list again; on an error the old one stays (logged).
  void reload();

  // The grant of the key a frame came with (its User-Id: the public key in
  // Z85), or nullptr when that key is no longer on the allow-list.
  const Grant* grant(const std::string& public_z85) const { return allow_list_.by_key(public_z85); }

  // Counts and logs (one line per key per 10 s) a refused frame or request.
  void refused(const std::string& who, const std::string& what, int64_t now_ms);
  uint64_t refusals() const { return refusals_; }

 private:
  zmq::context_t& context_;
  zmq::socket_t zap_;
  bool curve_ = false;
  std::string allow_list_path_;
  AllowList allow_list_;
  uint64_t refusals_ = 0;
  LogLimiter refusal_log_{10'000, 20, 10'000};
};

}  // namespace dueq::broker
