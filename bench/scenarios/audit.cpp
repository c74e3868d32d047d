#include "bench/scenarios.hpp"

#include <fstream>
#include <atomic>
#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

// A full `dueq audit` (every queue, every job) of a store holding 1,000,000
// scheduled jobs in 100 queues while 20,000 jobs/s flow through another
// queue: enqueue-to-start p99 of the jobs sent while the audit ran, beside
// the same flow without it, and whether any worker or lease lapsed.
Figures audit_under_load(const Options& o, Json&) {
  const size_t n = o.smoke ? 1'000 : 1'000'000;
  const int queues = o.smoke ? 1 : 100;
  const double rate = o.smoke ? 2'000 : 20'000;
  const double quiet_s = o.smoke ? 1 : 10;
  const int64_t warm_up_us = o.smoke ? 1'000'000 : 5'000'000;
  Cluster cluster;
  // The reconciler would start audits of its own: off, so that the
  // measured phases are with and without exactly one audit.
  restart_broker_without_reconciler(cluster);
  Figures f = redis_baselines(cluster.redis());
  const auto record = cluster.dir() / "starts.txt";
  start_workers(cluster, "flow", 1, 64, record.string());
  cluster.wait_for_workers(1);
  progress(fmt::format("audit: scheduling {} jobs in {} queues", n, queues));
  std::vector<JobSpec> jobs;
  jobs.reserve(n);
  const int64_t later = wall_ms() + 86'400'000;
  for (size_t i = 0; i < n; ++i) jobs.push_back({"held" + std::to_string(i % queues), "noop", std::string(100, 'x'), "", later, 0});
  enqueue_all(cluster.endpoint(), jobs, 2);
  jobs.clear();

  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 3});
  // Redis is still writing the loaded jobs' AOF to disk: warm up first.
  size_t sent = paced_flow(client, "flow", rate, [end = wall_us() + warm_up_us] { return wall_us() >= end; });
  // At this volume Redis rewrites its AOF every minute or so: a fork of a
  // 1.7 GB process (a stall of up to a few hundred ms), then a child that
  // competes for the cores for tens of seconds. Such rewrites landed in the
  // minutes-long audit phase and not in the 10 s without it, and made the
  // p99 ratio measure them rather than the audit: automatic rewrites are off
  // for both phases (after any running one ends), and forks are counted.
  stop_aof_rewrites(cluster.redis());
  const int64_t forks_before = info_field(cluster.redis(), "stats", "total_forks");
  progress(fmt::format("audit: {:.0f} jobs/s for {} s without an audit", rate, quiet_s));
  const int64_t quiet_start = wall_us();
  const int64_t quiet_end = quiet_start + static_cast<int64_t>(quiet_s * 1e6);
  sent += paced_flow(client, "flow", rate, [&] { return wall_us() >= quiet_end; });
  const int64_t forks_quiet = info_field(cluster.redis(), "stats", "total_forks");
  progress("audit: the same flow during a full audit");
  std::atomic<bool> audited{false};
  CliRun audit{-1, ""};
  const int64_t audit_start = wall_us();
  std::thread auditor([&] {
    audit = run_dueq(cluster.endpoint(), "--timeout 10s audit");
    audited = true;
  });
  sent += paced_flow(client, "flow", rate, [&] { return audited.load(); });
  const int64_t audit_end = wall_us();
  auditor.join();
  f["redis_forks_without_audit"] = static_cast<double>(forks_quiet - forks_before);
  f["redis_forks_during_audit"] = static_cast<double>(info_field(cluster.redis(), "stats", "total_forks") - forks_quiet);
  await([&] { return done_count(cluster, "flow") >= static_cast<int64_t>(sent); }, 60s);

  const auto quiet = flow_latencies(record, {quiet_start, quiet_end});
  const auto during = flow_latencies(record, {audit_start, audit_end});
  f["p99_ms_without_audit"] = percentile(quiet, 99);
  f["p99_ms_during_audit"] = percentile(during, 99);
  f["p50_ms_without_audit"] = percentile(quiet, 50);
  f["p50_ms_during_audit"] = percentile(during, 50);
  f["ratio_p99"] = f["p99_ms_during_audit"] / f["p99_ms_without_audit"];
  f["audit_s"] = static_cast<double>(audit_end - audit_start) / 1e6;
  f["audit_clean"] = audit.code == 0 && audit.out.find("audit: clean") != std::string::npos ? 1 : 0;
  f["worker_lapses"] = static_cast<double>(cluster.log_count("stopped heartbeating"));
  f["lease_lapses"] = static_cast<double>(cluster.log_count("expired leases"));
  auto stats = cluster.stats("flow");
  f["flow_retried"] = stats ? static_cast<double>(stats->retried) : -1;
  if (f["audit_clean"] == 0) progress("audit: " + audit.out.substr(0, 500));
  return f;
}

}  // namespace dueq::bench
