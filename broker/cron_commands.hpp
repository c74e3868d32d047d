#pragma once
// The ADMIN operations on periodic entries (`dueq cron add/list/remove`),
// run on the admin thread like the others in broker/admin_commands.hpp.
// add and remove write Redis first (the stored definition, the entry's
// state) and leave what the event loop's CronScheduler must learn in
// AdminEffects.
#include "broker/admin_commands.hpp"

namespace dueq::broker {

Result<proto::AdminReply> cron_add(AdminContext& c, const proto::AdminRequest& request);
Result<proto::AdminReply> cron_list(AdminContext& c, const proto::AdminRequest& request);
Result<proto::AdminReply> cron_remove(AdminContext& c, const proto::AdminRequest& request);

}  // namespace dueq::broker
