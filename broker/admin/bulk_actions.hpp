#pragma once
// Bulk actions by filter (`dueq bulk`): cancel or reschedule the scheduled
// or ready jobs, run the scheduled ones now, or replay or purge the dead
// jobs, of one queue that a `dueq list` filter selects, at a rate. A dry run counts them and changes nothing. A started
// action is a record in the store (dueq:{leader}:bulk, one JSON value per
// action) holding its filter and how far it got; the leader's admin thread
// (broker/admin/admin.cpp), when no request waits, works through the
// running ones a page at a time at their rate and moves the record on
// after each page, so that a broker that takes over
// (or restarts) goes on where the last one stopped. Every action is
// idempotent per job (a cancelled job cancelled again, a replayed one no
// longer dead), so a page done twice across a take-over changes nothing
// twice. One log line when an action starts and one when it ends name the
// key that asked, the queue, the filter and the count.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "broker/admin/admin_commands.hpp"
#include "broker/admin/job_list.hpp"

namespace dueq::broker {

inline const std::string kBulkKey = "dueq:{leader}:bulk";
inline constexpr size_t kMaxBulkRecords = 100;
inline constexpr int64_t kMaxBulkRate = 100'000;

struct BulkAction {
  std::string id;
  std::string queue;
  std::string action;  // cancel, replay, purge, run_now, reschedule
  std::map<std::string, std::string> filter;  // as `list` takes it (state, type, since, until, error, id_prefix)
  int64_t rate = 0;    // jobs per second (0: as fast as Redis's admin share allows)
  int64_t due_ms = 0;  // reschedule: the new due time (wall ms)
  int64_t spread_ms = 0;  // run_now, reschedule: each job's due time plus an offset in [0, spread) drawn from its id
  std::string requester;
  std::string status = "running";  // running, finished, failed
  std::string cursor;              // ListCursor text: where the next page starts ("" = the start)
  int64_t changed = 0;             // jobs the action changed so far
  int64_t started_ms = 0, finished_ms = 0;
  std::string error;

  std::string to_json() const;
  static Result<BulkAction> from_json(std::string_view text);
  // The filter's description for log lines: state=dead type=send ...
  std::string filter_text() const;
};

// The ADMIN operations: `bulk` (a dry run, or a started action) and
// `bulk_status` (every action kept, newest first, or args.id's).
Result<proto::AdminReply> bulk_start(AdminContext& c, const proto::AdminRequest& request);
Result<proto::AdminReply> bulk_status(AdminContext& c, const proto::AdminRequest& request);

// The running action to work on next (the oldest), if any.
Result<std::optional<BulkAction>> next_bulk_action(RedisClient& redis);
// One page of `action` (at most `page` jobs): its jobs from the cursor on
// changed and the record moved on (finished at the end). `ready_queues`
// gets the queue when jobs went back to ready (the loop leases them).
Result<void> run_bulk_page(RedisClient& redis, const BrokerConfig& config, BulkAction& action, int64_t now_ms, size_t page,
                           AdminEffects& effects);

}  // namespace dueq::broker
