#include "broker/admin/command_table.hpp"

#include <functional>
#include <map>

#include "broker/admin/cron_commands.hpp"
#include "broker/admin/group_commands.hpp"
#include "broker/admin/bulk_actions.hpp"
#include "broker/admin/job_control.hpp"
#include "broker/admin/job_list.hpp"
#include "broker/admin/job_search.hpp"
#include "broker/admin/key_commands.hpp"

namespace dueq::broker {

const AdminCommand* find_admin_command(std::string_view op) {
  constexpr bool kWrites = true, kReads = false;
  static const std::map<std::string_view, AdminCommand, std::less<>> table = {
      {"cancel", {cancel_jobs, kWrites}},
      {"dead_list", {list_dead, kReads}},
      {"replay", {[](AdminContext& c, const proto::AdminRequest& r) { return replay_or_purge(c, r, true); }, kWrites}},
      {"purge", {[](AdminContext& c, const proto::AdminRequest& r) { return replay_or_purge(c, r, false); }, kWrites}},
      {"audit", {audit_queues, kReads}},
      {"scheduled", {list_scheduled, kReads}},
      {"list", {list_jobs, kReads}},
      {"search", {search_jobs, kReads}},
      {"bulk", {bulk_start, kWrites}},
      {"bulk_status", {bulk_status, kReads}},
      {"pause", {[](AdminContext& c, const proto::AdminRequest& r) { return pause_or_resume(c, r, true); }, kWrites}},
      {"resume", {[](AdminContext& c, const proto::AdminRequest& r) { return pause_or_resume(c, r, false); }, kWrites}},
      {"cron_add", {cron_add, kWrites}},
      {"cron_list", {cron_list, kReads}},
      {"cron_remove", {cron_remove, kWrites}},
      {"key_limit", {key_limit, kWrites}},
      {"key_weight", {key_weight, kWrites}},
      {"key_rate", {key_rate, kWrites}},
      {"key_list", {key_list, kReads}},
      {"job_reschedule", {reschedule_job, kWrites}},
      {"job_edit", {edit_job, kWrites}},
      {"batch_close", {close_batch, kWrites}},
      {"group", {show_group, kReads}},
  };
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace dueq::broker
