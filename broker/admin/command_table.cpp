#include "broker/admin/command_table.hpp"

#include <functional>
#include <map>

#include "broker/admin/cron_commands.hpp"
#include "broker/admin/bulk_actions.hpp"
#include "broker/admin/job_control.hpp"
#include "broker/admin/job_list.hpp"
#include "broker/admin/job_search.hpp"
#include "broker/admin/key_commands.hpp"

namespace dueq::broker {

AdminCommand find_admin_command(std::string_view op) {
  static const std::map<std::string_view, AdminCommand, std::less<>> table = {
      {"cancel", cancel_jobs},
      {"dead_list", list_dead},
      {"replay", [](AdminContext& c, const proto::AdminRequest& r) { return replay_or_purge(c, r, true); }},
      {"purge", [](AdminContext& c, const proto::AdminRequest& r) { return replay_or_purge(c, r, false); }},
      {"audit", audit_queues},
      {"scheduled", list_scheduled},
      {"list", list_jobs},
      {"search", search_jobs},
      {"bulk", bulk_start},
      {"bulk_status", bulk_status},
      {"pause", [](AdminContext& c, const proto::AdminRequest& r) { return pause_or_resume(c, r, true); }},
      {"resume", [](AdminContext& c, const proto::AdminRequest& r) { return pause_or_resume(c, r, false); }},
      {"cron_add", cron_add},
      {"cron_list", cron_list},
      {"cron_remove", cron_remove},
      {"key_limit", key_limit},
      {"key_weight", key_weight},
      {"key_rate", key_rate},
      {"key_list", key_list},
      {"job_reschedule", reschedule_job},
      {"job_edit", edit_job},
  };
  auto it = table.find(op);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace dueq::broker
