#pragma once
// Changing one waiting job by id (docs/jobs.md, "Changing a waiting job"):
// `job_reschedule` moves its due time (or runs it now) and `job_edit`
// replaces its payload if its version is still the one the caller read.
// Both refuse a job that is leased or finished with Errc::conflict, and keep
// its id, attempts, key and unique hold. Each is one Lua step
// (lua/reschedule.lua, lua/edit.lua), on the admin thread.
#include <map>
#include <string>

#include "broker/admin/admin_commands.hpp"

namespace dueq::broker {

// lua/edit.lua's status.
enum class EditStatus : int64_t { not_waiting = -1, changed = 0, edited = 1 };

namespace calls {
Command edit(const std::string& queue, const std::string& id, const std::string& read_record,
             const std::string& new_record);
Result<EditStatus> parse_edit(const redisReply* reply);
}  // namespace calls

// ADMIN job_reschedule: ids = [id], queue (optional), args `at_ms` (the new
// due time) or `now` "1". The row: id, queue, state (scheduled or ready),
// due_ms.
Result<proto::AdminReply> reschedule_job(AdminContext& c, const proto::AdminRequest& request);
// ADMIN job_edit: ids = [id], queue (optional), args `payload` and
// `version` (the job document's `v`). The row: id, queue, state, version
// (the new one).
Result<proto::AdminReply> edit_job(AdminContext& c, const proto::AdminRequest& request);

}  // namespace dueq::broker
