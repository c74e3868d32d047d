#pragma once
// The broker's typed view of Redis: every change goes through one of the Lua
// scripts in lua/, built into pipelined rounds so that a loop iteration of the
// broker costs one round trip however many jobs it moves.
#include <array>
#include <deque>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "broker/job_record.hpp"
#include "broker/keys.hpp"
#include "broker/redis_connection.hpp"
#include "common/error.hpp"
#include "common/protocol.hpp"
#include "common/redis_url.hpp"
#include "lua/scripts.hpp"

namespace dueq::broker {

struct LeasedJob {
  std::string id;
  JobRecord record;
  uint32_t attempt = 0;
  uint64_t token = 0;
};

struct TokenRef {
  std::string id;
  uint64_t token = 0;
};

enum class NackMode {
  retry,         // back to the schedule after backoff
  now,           // back to ready at once, counted as an attempt (worker lost)
  dead,          // straight to the dead-letter set
  handed_back,   // back to ready at once, not counted (never started)
  cancel,        // ends cancelled
};

struct NackItem {
  std::string id;
  uint64_t token = 0;
  NackMode mode = NackMode::retry;
  std::string reason;
  double jitter = 0;  // [0, 1]
};

struct NackOutcome {
  int status = 0;  // 0 stale, 1 retried, 2 dead, 3 cancelled
  int64_t due_ms = 0;
};

struct PromoteOutcome {
  int64_t moved = 0;
  int64_t next_due_ms = -1;
};

struct ReclaimOutcome {
  int64_t requeued = 0;
  int64_t dead = 0;
  int64_t next_deadline_ms = -1;
};

struct AuditCounts {
  int64_t scheduled = 0, ready = 0, leased = 0, dead = 0, accepted = 0, done = 0, cancelled = 0, purged = 0;
  // accepted == done + cancelled + purged + dead + scheduled + ready + leased
  int64_t imbalance() const { return accepted - (done + cancelled + purged + dead + scheduled + ready + leased); }
};

struct AuditSlice {
  AuditCounts counts;  // only from a call without ids
  std::vector<std::pair<std::string, std::string>> problems;  // id, description
};

// A schedule filter counter that disagrees with its bucket's ids.
struct FilterBucket {
  int64_t partition = 0;
  int64_t tail = 0;
  int64_t counter = 0;
  int64_t ids = 0;
};

struct CancelOutcome {
  int status = 0;      // 1 cancelled, 2 cancel requested (leased), 0 not found, -1 already finished
  uint64_t token = 0;  // with status 2: the delivery to stop
};

// A batch of store operations sent in one round trip. Each add_* returns the
// index of its reply in Store::execute's result.
class Round {
 public:
  size_t enqueue(const std::string& queue, const std::vector<const proto::NewJob*>& jobs, int64_t now_ms,
                 uint32_t default_max_attempts, int64_t max_backlog);
  size_t promote(const std::string& queue, int64_t now_ms, int limit);
  size_t lease(const std::string& queue, int64_t deadline_ms, int count);
  size_t ack(const std::string& queue, int64_t now_ms, int64_t retention_s, const std::vector<TokenRef>& items);
  size_t nack(const std::string& queue, int64_t now_ms, int64_t base_ms, int64_t cap_ms, int64_t retention_s,
              const std::vector<NackItem>& items);
  size_t extend(const std::string& queue, int64_t deadline_ms, const std::vector<TokenRef>& items);
  size_t reclaim(const std::string& queue, int64_t now_ms, int limit, int64_t retention_s);
  size_t stats(const std::string& queue);
  size_t cancel(const std::string& queue, int64_t now_ms, const std::string& id, int64_t retention_s);
  size_t replay(const std::string& queue, int64_t now_ms, const std::vector<std::string>& ids);
  size_t replay_oldest(const std::string& queue, int64_t now_ms, int limit);
  size_t purge(const std::string& queue, const std::vector<std::string>& ids);
  size_t purge_dead_before(const std::string& queue, int64_t cutoff_ms, int limit);
  size_t cap_leases(const std::string& queue, int64_t cap_ms, int limit);
  size_t audit(const std::string& queue, const std::vector<std::string>& ids);
  size_t repair(const std::string& queue, const std::vector<std::string>& ids);
  size_t migrate_schedule(const std::string& queue, const std::vector<std::string>& ids);
  // `set` makes the counters exact; `filter_key` is the queue's schedule
  // filter or a key being built to replace it.
  size_t filter_check(const std::string& queue, const std::string& filter_key, bool set,
                      const std::vector<uint32_t>& partitions);
  size_t sweep(const std::string& queue, int64_t cutoff_ms, int limit);
  size_t show(const std::string& queue, const std::string& id);
  size_t scan_ids(const std::string& hash_key, const std::string& cursor, int count);
  size_t command(Command command);

  bool empty() const { return commands_.empty(); }
  size_t size() const { return commands_.size(); }

 private:
  friend class Store;
  size_t script(lua::ScriptId id, std::vector<std::string> keys, Command args);
  std::vector<std::optional<lua::ScriptId>> scripts_;
  std::vector<std::vector<std::string>> keys_;
  std::vector<Command> commands_;  // script arguments, or a whole plain command
};

class Store {
 public:
  explicit Store(RedisAddress address, int timeout_ms = 2000) : address_(std::move(address)), timeout_ms_(timeout_ms) {}

  // Connects and loads the scripts. Safe to call again after a failure.
  Result<void> connect();
  bool connected() const { return connection_.has_value() && !connection_->broken(); }
  void disconnect() {
    connection_.reset();
    outstanding_.clear();
  }
  const RedisAddress& address() const { return address_; }

  // Refuses a Redis that can lose accepted jobs: persistence off or an
  // eviction policy other than noeviction. The message says what to change.
  Result<void> check_durability_settings();
  // Redis settings below deploy/redis.conf's that cost memory (listpack
  // limits) or throughput and latency (the AOF rewrite threshold), as one
  // message naming each and what it costs; empty when all are at least as
  // high. Advice, not a refusal.
  Result<std::string> settings_advice();

  // Pipelined rounds. send() writes a round and returns; receive() reads the
  // replies of the oldest round sent (blocking up to the timeout; a caller
  // that wants to do other work meanwhile polls socket_fd() first, unless
  // replies_buffered()). If Redis lost
  // its script cache (restart, SCRIPT FLUSH) the scripts are reloaded and the
  // commands it refused sent again, in their original order.
  Result<void> send(const Round& round);
  Result<std::vector<ReplyPtr>> receive();
  size_t outstanding() const { return outstanding_.size(); }
  int socket_fd() const { return connection_->fd(); }
  // The oldest round's replies may already be read off the socket (they
  // arrived with the previous round's): then the socket never turns readable.
  bool replies_buffered() const { return connection_->has_buffered_input(); }
  // send + receive; refused while rounds are outstanding (their replies
  // come first on the connection).
  Result<std::vector<ReplyPtr>> execute(const Round& round);

  // Reads for the admin commands and the auditor.
  Result<std::vector<std::string>> known_queues();
  Result<std::map<std::string, std::string>> job_fields(const std::string& queue, const std::string& id);
  // One HSCAN step over a hash of job records: next cursor ("0" = done) and ids.
  Result<std::pair<std::string, std::vector<std::string>>> scan_hash_ids(const std::string& hash_key,
                                                                         const std::string& cursor);
  // Members [start, start+count) of a sorted set, by rank.
  Result<std::vector<std::string>> range_ids(const std::string& key, int64_t start, int64_t count);
  // Moves the jobs of a schedule written by a dueq version before the
  // partitioned schedule into it, 500 per call; returns how many moved.
  Result<int64_t> migrate_legacy_schedule(const std::string& queue);
  // The schedule filter's wrong counters over every partition (with `set`:
  // the ones corrected).
  Result<std::vector<FilterBucket>> check_schedule_filter(const std::string& queue, const std::string& filter_key,
                                                          bool set);
  // Builds the schedule filter of a store written before it existed (the
  // schedule holds jobs but there is no filter); true if it did. Run before
  // anything enqueues: an enqueue trusts the filter.
  Result<bool> build_missing_schedule_filter(const std::string& queue);
  // Dead-lettered jobs, oldest first: id, died ms and the job fields.
  Result<std::vector<std::map<std::string, std::string>>> dead_jobs(const std::string& queue, int64_t limit);

  static Result<std::vector<int64_t>> parse_integers(const redisReply* reply);
  static Result<std::vector<LeasedJob>> parse_lease(const redisReply* reply);
  static Result<std::vector<NackOutcome>> parse_nack(const redisReply* reply);
  static Result<PromoteOutcome> parse_promote(const redisReply* reply);
  static Result<ReclaimOutcome> parse_reclaim(const redisReply* reply);
  static Result<proto::QueueStats> parse_stats(const std::string& queue, const redisReply* reply);
  static Result<std::vector<std::string>> parse_strings(const redisReply* reply);
  static Result<AuditSlice> parse_audit(const redisReply* reply);
  static Result<std::vector<FilterBucket>> parse_filter_check(const redisReply* reply);
  static Result<CancelOutcome> parse_cancel(const redisReply* reply);
  // The job as a field map (s, t, p, d, a, m, k, c, bb, bc, e, el, f, cx);
  // empty when the job is unknown.
  static Result<std::map<std::string, std::string>> parse_show(const redisReply* reply);

 private:
  Result<void> load_scripts();
  Command build(const Round& round, size_t index) const;
  // Reads every outstanding round's replies, reloads the scripts and sends
  // the refused commands again, oldest round first.
  Result<void> recover_lost_scripts();
  // CONFIG GET of each name, in one round trip; nullopt where Redis gave no
  // value (CONFIG renamed or disabled).
  Result<std::vector<std::optional<std::string>>> config_values(const std::vector<std::string>& names);

  struct OutstandingRound {
    std::vector<Command> commands;
    std::optional<std::vector<ReplyPtr>> replies;  // read ahead by recover_lost_scripts
  };

  RedisAddress address_;
  int timeout_ms_;
  std::optional<RedisConnection> connection_;
  std::array<std::string, lua::kScriptCount> shas_;
  std::deque<OutstandingRound> outstanding_;
};

}  // namespace dueq::broker
