#pragma once
// Flows and batches on the admin thread (docs/flows.md): `batch_close`
// closes a batch (lua/enqueue_group.lua with no jobs), and `group` reads a
// flow's or a batch's status and a page of its members
// (lua/group_show.lua): `dueq batch status`, `dueq flow children`, the
// dashboard, a parent's handler reading its children's results.
#include <string>

#include "broker/admin/admin_commands.hpp"

namespace dueq::broker {

namespace calls {
// group_show.lua for GROUP ("f" + a parent's id or "b" + a batch id).
Command group_show(const std::string& queue, const std::string& group, const std::string& cursor, int64_t count);
}  // namespace calls

// ADMIN batch_close: queue, args `batch`. The row: batch, result ("closed",
// or why not: no such batch, closed already).
Result<proto::AdminReply> close_batch(AdminContext& c, const proto::AdminRequest& request);
// ADMIN group: queue, args `batch` or `parent` (one of them), `after` (the
// member cursor of the last reply's `next`), `limit` (members, 0..100,
// default 50). The first row is the group's status (kind, state, open,
// total, pending, done, dead, cancelled, parent, success, complete,
// settled_ms); each further row a member (member, member_state, result,
// error). `next` is "" on the last page.
Result<proto::AdminReply> show_group(AdminContext& c, const proto::AdminRequest& request);

}  // namespace dueq::broker
