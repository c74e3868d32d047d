#pragma once
// The operator commands an ADMIN frame names, one function each, and the
// table from operation name to function: cancel, dead_list, replay, purge,
// audit, scheduled, pause, resume. Each runs on the admin thread (broker/admin/admin.hpp), in bounded steps
// on its own connection; what the event loop must do afterwards (tell a
// worker to stop a cancelled job, look at a queue's ready jobs) is left in
// AdminEffects.
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "broker/config/config.hpp"
#include "broker/config/cron_entry.hpp"
#include "broker/store/round.hpp"
#include "broker/store/redis_client.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

// lua/cancel.lua's status.
enum class CancelStatus : int64_t { already_finished = -1, not_found = 0, cancelled = 1, cancel_requested = 2 };
struct CancelOutcome {
  CancelStatus status = CancelStatus::not_found;
  uint64_t token = 0;  // with cancel_requested (the job is leased): the delivery to stop
  int64_t released_due_ms = -1;  // a job held for its group the cancel released (lua/lib/group.lua): its due ms
};

// Where a dead-letter listing goes on (dead_list's `after`, the reply's
// `next`): the first queue not yet listed in full, in name order, and the
// rank in its dead set to go on from. On the wire "QUEUE:RANK" (queue names
// hold no colon); clients pass it back as they got it. Ranks
// move when dead letters are replayed or purged between pages: a page then
// skips or repeats a few rows, as any offset paging does.
struct DeadListCursor {
  std::string queue;
  int64_t rank = 0;
  std::string text() const;
  // "" is the start. A malformed text is bad_argument.
  static Result<DeadListCursor> parse(std::string_view text);
};

namespace calls {
// With `keep_history` a job cancelled at once keeps its document in the
// queue's history hash (retention_s > 0).
Command cancel(const std::string& queue, int64_t now_ms, const std::string& id, int64_t retention_s,
               bool keep_history = false);
Result<CancelOutcome> parse_cancel(const redisReply* reply);
// replay.lua / purge.lua: the ids they moved.
Command replay(const std::string& queue, int64_t now_ms, const std::vector<std::string>& ids);
Command replay_oldest(const std::string& queue, int64_t now_ms, int limit);
Command purge(const std::string& queue, const std::vector<std::string>& ids);
// reschedule.lua: `ids` (at most 1,000) due at `due_ms`, each plus an
// offset in [0, spread_ms) drawn from its id (the same on every call, so a
// page done twice moves nothing twice); one status per id, 1 moved, 0 left
// alone (reply::integers).
Command reschedule(const std::string& queue, int64_t now_ms, int64_t due_ms, const std::vector<std::string>& ids,
                   int64_t spread_ms = 0);
Command purge_dead_before(const std::string& queue, int64_t cutoff_ms, int limit);
// pause.lua: whether the call changed the queue's state, and since when it
// is paused (0 while it runs).
Command pause(const std::string& queue, bool pause, int64_t now_ms);
}  // namespace calls
enum class PauseChange : int64_t { already_so = 0, changed = 1 };
struct PauseOutcome {
  PauseChange change = PauseChange::already_so;
  int64_t paused_since_ms = 0;
};
namespace calls {
Result<PauseOutcome> parse_pause(const redisReply* reply);
}  // namespace calls

struct AdminEffects {
  std::vector<proto::JobRef> stop_running;  // cancelled while running: tell its worker
  std::vector<std::string> ready_queues;    // replayed into ready, or a cancel that may have freed a key's turn
  std::map<std::string, int64_t> earliest_due;  // rescheduled: a queue's earliest new due ms (wall)
  std::vector<std::string> paused_queues;
  std::vector<std::string> resumed_queues;
  std::vector<CronEntry> cron_put;  // added or replaced: ticks start after now
  std::vector<std::string> cron_removed;
  // A job of QUEUE is due at DUE_MS (rescheduled, or held for its group and
  // released): the loop promotes then if that is earlier than it knew of.
  void due_at(const std::string& queue, int64_t due_ms) {
    if (due_ms < 0) return;
    auto [it, added] = earliest_due.emplace(queue, due_ms);
    if (!added) it->second = std::min(it->second, due_ms);
  }
};

struct AdminContext {
  RedisClient& redis;
  const BrokerConfig& config;
  int64_t now_ms = 0;  // wall clock
  AdminEffects& effects;
  std::string requester = "-";  // the requester's key name (CURVE), for audit lines
};

// With min_replicas: WAITs until that many replicas have every write this
// connection made (on every master, behind a Redis Cluster). An operator's
// change answered done must survive a fail-over as an accepted job does:
// fewer replicas within replica_timeout is `unavailable` ("made on the
// master, may be lost: look and retry"). Without min_replicas, nothing.
Result<void> await_replicas(RedisClient& redis, const BrokerConfig& config);

// An integer ADMIN argument in lo..hi: nullopt when absent, bad_argument
// (naming it and the range) when it is malformed or out of range.
Result<std::optional<int64_t>> integer_arg(const proto::AdminRequest& request, const char* name, int64_t lo, int64_t hi);

// A job's fields as a list shows them: without its payload and error log
// (`dueq job` has those), with their sizes (p_bytes, el_bytes).
std::map<std::string, std::string> listed_row(std::map<std::string, std::string>&& fields);

// The ADMIN operations, one function each (broker/admin/command_table.cpp
// finds them by name). Each validates its request and changes nothing when
// it is refused.
Result<proto::AdminReply> cancel_jobs(AdminContext& c, const proto::AdminRequest& request);
Result<proto::AdminReply> list_dead(AdminContext& c, const proto::AdminRequest& request);
Result<proto::AdminReply> list_scheduled(AdminContext& c, const proto::AdminRequest& request);
Result<proto::AdminReply> replay_or_purge(AdminContext& c, const proto::AdminRequest& request, bool replay);
Result<proto::AdminReply> audit_queues(AdminContext& c, const proto::AdminRequest& request);
Result<proto::AdminReply> pause_or_resume(AdminContext& c, const proto::AdminRequest& request, bool pause);

}  // namespace dueq::broker
