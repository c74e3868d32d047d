#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "broker/config/cron_entry.hpp"
#include "common/error.hpp"

namespace dueq::broker {

// Retry and retention policy of one queue ([queues.NAME] in the config file).
struct QueuePolicy {
  uint32_t max_attempts = 5;
  int64_t backoff_base_ms = 1'000;
  int64_t backoff_cap_ms = 600'000;
  int64_t done_retention_s = 3'600;  // how long `dueq job ID` can still see a done or cancelled job
  // ... and how many of each at most (about 118 bytes of Redis per id), but
  // for those finished within the duplicate window: a resend of an enqueue
  // whose reply was lost (the client resends for 15 s by default) is
  // answered "duplicate" for at least this long at any rate, which costs
  // 118 B x rate x window (30 s at 100,000 jobs/s: 354 MB).
  int64_t done_max = 1'000'000;
  int64_t duplicate_window_ms = 30'000;
  // How long and how many (of the done, and of the cancelled) finished
  // jobs keep their whole document (payload, attempts, errors, start,
  // worker) for `dueq job`, `dueq list` and the dashboard: `history_max`
  // newest of each, none older than `history_retention` (0 = no history).
  // Off unless set: keeping them costs Redis a write and a trim per job
  // (bulk processing 0.67x, docs/jobs.md) and memory (the memory bench);
  // dead letters are kept apart and never trimmed.
  int64_t history_retention_s = 0;
  int64_t history_max = 1'000;
  bool keeps_history() const { return history_retention_s > 0 && history_max > 0; }
  // The most unfinished jobs (scheduled + ready + leased) the queue holds;
  // new ones past it are answered overloaded (0 = no limit). The default,
  // about 2.3 GB of Redis at 234 bytes per delayed job, bounds what one
  // producer can make Redis keep.
  int64_t max_backlog = 10'000'000;
  // How often one job's handlers may snooze it (run me again later, no
  // attempt used: docs/jobs.md); one more snooze makes it dead with the
  // reason "snoozed too often". 0 = no limit.
  int64_t max_snoozes = 100;
  // How long after its delivery a job's lease is still renewed for the
  // worker that holds it: a peer that heartbeats and never finishes its
  // jobs loses them within this plus lease_ttl (Faktory's reserve_for).
  // A job still running then is delivered again, so set it above the
  // queue's longest job.
  int64_t max_run_time_ms = 1'800'000;
  // Limits the broker applies when it leases (lua/lease.lua), whatever the
  // workers do: at most `rate_limit` jobs started per second on average,
  // `rate_burst` at once after a quiet spell (0 = no rate limit), and at
  // most `concurrency_limit` jobs of the queue leased at once across every
  // worker (0 = none).
  double rate_limit = 0;
  int64_t rate_burst = 1;
  int64_t concurrency_limit = 0;
  // Per-key limits (docs/keys.md): at most `key_concurrency` jobs of one
  // key leased at once (0 = none, unless `dueq key limit` gave the key its
  // own); `ordered`: one job of a key at a time, in due then id order, and
  // a job waiting for a retry keeps its key's turn.
  int64_t key_concurrency = 0;
  // At most `key_rate` jobs of one key started per second on average (0 =
  // none, unless `dueq key rate` gave the key its own), `key_rate_burst` at
  // once after a quiet spell.
  double key_rate = 0;
  int64_t key_rate_burst = 1;
  bool ordered = false;
  // Named keys' own settings (`[queues.NAME.keys."KEY"]`), as `dueq key
  // limit`, `rate` and `weight` would send them ("" where not set): a broker
  // that takes the lead writes them to Redis (broker/admin/key_commands.hpp).
  struct KeySettings {
    std::string limit, rate, weight;
  };
  std::map<std::string, KeySettings> keys;
  // Fair dispatch (docs/keys.md): keys with jobs ready share the queue's
  // leases by weight (`dueq key weight`, 1 by default), whatever their
  // backlogs, instead of the earliest due going first.
  bool fair = false;
  bool limited() const {
    return rate_limit > 0 || concurrency_limit > 0 || key_concurrency > 0 || key_rate > 0 || ordered;
  }
};

struct BrokerConfig {
  // Empty: the embedded store (broker/store/embedded_store.hpp) in data_dir.
  std::string redis_url;
  std::string data_dir;  // empty: ~/.dueq (the user's home directory)
  std::string listen = "tcp://127.0.0.1:7600";  // this host only: a network port needs CURVE (or insecure)
  // "[host]:port" of the HTTP server (/metrics, /healthz, /readyz); empty:
  // none. The host defaults to 127.0.0.1.
  std::string http;
  // A file whose first line is the token the dashboard's replay and purge
  // need (Authorization: Bearer); empty: the dashboard is read-only.
  std::string dashboard_token_file;
  bool allow_unsafe_redis = false;
  std::string log_level = "info";
  // CurveZMQ (docs/security.md): the broker's key file (`dueq keygen`) and
  // the allow-list of client keys (a file or a directory). Without them the
  // broker listens only on loopback or ipc, unless `insecure` says a
  // plaintext network port is meant.
  std::string curve_key;
  std::string allow_list;
  bool insecure = false;

  int64_t heartbeat_ms = 500;          // workers heartbeat this often
  int64_t worker_timeout_ms = 1'500;   // silence after which a worker is dead
  int64_t delivery_timeout_ms = 2'000; // a pushed job must be reported by then
  int64_t lease_ttl_ms = 10'000;       // lease length once a worker holds the job

  int lease_batch = 500;               // jobs per lease script call
  int promote_batch = 2'000;           // jobs per promote script call
  int reclaim_batch = 1'000;           // leases per reclaim script call
  int max_frames_per_turn = 5'000;     // frames read before touching Redis
  // The most jobs one worker is sent at once, whatever capacity it announces:
  // a worker that announces a large one and falls silent takes that many
  // jobs away until it is declared dead.
  int max_worker_capacity = 1'024;
  // The most TASKS bytes, in MiB, a worker may leave unread: sent to it and
  // not yet confirmed by RECEIVED. A peer past it has stopped reading its
  // socket: it is declared lost and its jobs go back, so what the broker
  // queues for one connection stays under about this much.
  int max_unread_mib = 64;
  int64_t max_unread_bytes() const { return int64_t{max_unread_mib} << 20; }
  // The most queues the broker keeps (each costs work every turn): past it,
  // jobs for a new queue are rejected and a HELLO naming one is refused.
  int max_queues = 1'000;

  // Brokers sharing one store (broker/loop/leadership.hpp): the leader renews a
  // lease this long every quarter of it; a standby takes over once it
  // lapses. `advertise` is the endpoint standbys name to clients as the
  // leader's (empty: the bound one when it is not a wildcard address).
  int64_t leader_lease_ms = 2'000;
  std::string advertise;

  int min_replicas = 0;                // > 0: confirm enqueues and admin changes only after WAIT saw this many replicas
  int64_t replica_timeout_ms = 1'000;  // how long WAIT may take
  int64_t reconcile_interval_ms = 60'000;  // background audit and repair (0 = off)
  // Periodic jobs (broker/loop/cron_scheduler.hpp): each tick due within this much is
  // enqueued ahead, so a broker restart or take-over shorter than it misses
  // none; longer gaps follow the entry's misfire policy.
  int64_t cron_lookahead_ms = 60'000;
  int64_t overload_retry_after_ms = 1'000; // hint given to producers refused for backlog

  QueuePolicy default_policy;
  std::map<std::string, QueuePolicy> queues;
  std::vector<CronEntry> cron;  // [cron.NAME]: periodic jobs (broker/loop/cron_scheduler.hpp)

  const QueuePolicy& policy(const std::string& queue) const {
    auto it = queues.find(queue);
    return it == queues.end() ? default_policy : it->second;
  }
};

// Reads a TOML file over the defaults in `config`. Unknown keys and values out
// of range are errors naming the key.
Result<void> load_config_file(const std::string& path, BrokerConfig& config);
// The same for a file's text already read; `source` names it in errors.
Result<void> load_config_text(std::string_view text, std::string_view source, BrokerConfig& config);

// Checks relations between settings (e.g. timeout longer than heartbeat).
Result<void> validate_config(const BrokerConfig& config);

// "[host]:port" (host defaults to 127.0.0.1; port 0..65535) as host and port.
Result<std::pair<std::string, int>> parse_http_address(std::string_view address);

// True for endpoints only this host can reach: ipc, inproc, loopback tcp.
bool is_local_endpoint(const std::string& endpoint);

}  // namespace dueq::broker
