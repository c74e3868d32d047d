#pragma once
// The ADMIN command table: each operation's name on the wire
// (docs/protocol.md, ADMIN) and the function that runs it on the admin
// thread (broker/admin/admin_commands.hpp, broker/admin/cron_commands.hpp).
#include <string_view>

#include "broker/admin/admin_commands.hpp"

namespace dueq::broker {

using AdminCommandFn = Result<proto::AdminReply> (*)(AdminContext& context, const proto::AdminRequest& request);

struct AdminCommand {
  AdminCommandFn run = nullptr;
  // It changes jobs or queues: with min_replicas it is answered once WAIT
  // saw that many replicas take the change (Admin::handle).
  bool writes = false;
};

// The command named `op`; nullptr when there is none.
const AdminCommand* find_admin_command(std::string_view op);

}  // namespace dueq::broker
