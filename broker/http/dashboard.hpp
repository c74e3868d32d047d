#pragma once
// The web dashboard on the HTTP server's address: one page (its HTML, CSS
// and JavaScript carried in the binary, nothing from elsewhere) and the JSON
// it reads. Counts, rates, lateness and workers come from the metrics
// snapshot (broker/loop/metrics.hpp); scheduled jobs, dead letters and job
// lookups are asked of the leader's admin thread (broker/admin/admin_gateway.hpp),
// which paces them to its share of Redis. Reading needs nothing; replaying
// and purging need the admin token (Authorization: Bearer), and without a
// token configured they are off.
#include <httplib.h>

#include <string>

#include "broker/admin/admin_gateway.hpp"
#include "broker/loop/metrics.hpp"
#include "common/error.hpp"

namespace dueq::broker {

class Dashboard {
 public:
  // `token`: the admin token ("" = replay and purge are off).
  Dashboard(Metrics& metrics, AdminGateway& admin, std::string token)
      : metrics_(metrics), admin_(admin), token_(std::move(token)) {}

  void add_routes(httplib::Server& server);
  void add_job_routes(httplib::Server& server);
  void add_group_routes(httplib::Server& server);

  static constexpr size_t kMaxIds = 1'000;          // per replay or purge
  static constexpr std::chrono::milliseconds kAdminWait{10'000};

 private:
  std::string overview_json() const;
  // Runs an admin request and writes its answer as JSON.
  // Rows that are jobs (job_rows) go out as job documents (docs/jobs.md).
  void answer(Admin::Request request, httplib::Response& res, bool job_rows = false) const;
  bool authorized(const httplib::Request& req) const;
  // Replay or purge (`op`): only with the admin token.
  // The admin token is set and given (else 403 or 401 sent).
  bool admin_allowed(const httplib::Request& req, httplib::Response& res) const;
  void change(const char* op, const httplib::Request& req, httplib::Response& res) const;

  Metrics& metrics_;
  AdminGateway& admin_;
  const std::string token_;
};

// The admin token in a file (its first line, 16..256 printable characters).
Result<std::string> read_dashboard_token(const std::string& path);

}  // namespace dueq::broker
