#pragma once
// The ADMIN operations on periodic entries (`dueq cron add/list/remove`),
// run on the admin thread like the others in broker/admin/admin_commands.hpp.
// add and remove write Redis first (the stored definition, the entry's
// state) and leave what the event loop's CronScheduler must learn in
// AdminEffects.
#include "broker/admin/admin_commands.hpp"

namespace dueq::broker {

namespace calls {
// cron_restart.lua: `entry`'s fresh state, and its tick ids in (now, now +
// lookahead] (at most 1,000) freed from the cancelled set. Answers the
// number freed.
Command cron_restart(const CronEntry& entry, int64_t now_ms, int64_t lookahead_ms);
// cron_retire.lua: ends `entry`'s ticks in its queue; answers the last tick
// it had enqueued (ms, 0 for none).
Command cron_retire(const CronEntry& entry);
Result<int64_t> parse_cron_retire(const redisReply* reply);
}  // namespace calls

Result<proto::AdminReply> cron_add(AdminContext& c, const proto::AdminRequest& request);
Result<proto::AdminReply> cron_list(AdminContext& c, const proto::AdminRequest& request);
Result<proto::AdminReply> cron_remove(AdminContext& c, const proto::AdminRequest& request);

}  // namespace dueq::broker
