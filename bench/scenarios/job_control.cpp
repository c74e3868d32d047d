#include <thread>

#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {

constexpr int64_t kSnoozeMs = 200;
constexpr int64_t kMovedByMs = 1'000;
// The admin thread answers a job command in about a millisecond, but at a
// share of Redis's time while jobs flow (docs/architecture.md): some answers
// take 20 ms. Asked one at a time every 10 ms, 300 ms ahead, none falls
// so far behind that its job is already due.
constexpr int64_t kSpacingMs = 10, kAheadMs = 300;

// The percentiles of `values` into `f` as NAME_p50 and NAME_p99.
void put_percentiles(Figures& f, const std::string& name, const std::vector<double>& values) {
  f[name + "_p50"] = percentile(values, 50);
  f[name + "_p99"] = percentile(values, 99);
}

}  // namespace

// Job control: 2,000 jobs (200 in a smoke run) due 10 ms apart, each
// rescheduled by id 1 s later 300 ms before its due time, one call at a
// time (`Client::reschedule`): how long an answer takes, and how
// late after its new due time each job starts (the lateness target). Then
// 1,000 (100) jobs whose handler snoozes them once for 200 ms: how long
// after that delay each starts again. One example worker of 16 handlers.
Figures job_control(const Options& o, Json& table) {
  const int n = o.smoke ? 200 : 2'000, snoozed = o.smoke ? 100 : 1'000;
  Figures f;
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("jc", 16, record.string());
  if (!cluster.wait_for_workers(1)) throw std::runtime_error("job_control: no worker registered");
  Client client(cluster.endpoint());
  const int64_t first_due = wall_ms() + 3'000;
  std::vector<JobSpec> jobs;
  jobs.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    jobs.push_back({.queue = "jc", .type = "noop", .id = fmt::format("r-{}", i), .due_ms = first_due + i * kSpacingMs});
  enqueue_all(cluster.endpoint(), jobs, 1);
  progress(fmt::format("job_control: {} reschedules by id, {} ms before each job's due time", n, kAheadMs));
  std::map<std::string, int64_t> moved_to;
  std::vector<double> answer_ms;
  std::string refusal;
  for (int i = 0; i < n; ++i) {
    const int64_t due = first_due + i * kSpacingMs;
    while (wall_ms() < due - kAheadMs) std::this_thread::sleep_for(std::chrono::microseconds(200));
    const int64_t asked = steady_us();
    auto moved = client.reschedule(jobs[static_cast<size_t>(i)].id, due + kMovedByMs, "jc");
    if (moved) moved_to[jobs[static_cast<size_t>(i)].id] = due + kMovedByMs;
    else if (refusal.empty()) refusal = moved.error().code + ": " + moved.error().message;
    answer_ms.push_back(static_cast<double>(steady_us() - asked) / 1000.0);
  }
  if (!refusal.empty()) progress("job_control: a reschedule refused: " + refusal);
  std::vector<JobSpec> snoozing;
  snoozing.reserve(static_cast<size_t>(snoozed));
  for (int i = 0; i < snoozed; ++i)
    snoozing.push_back({.queue = "jc", .type = "snooze_once", .payload = std::to_string(kSnoozeMs), .id = fmt::format("s-{}", i)});
  enqueue_all(cluster.endpoint(), snoozing, 1);
  const int64_t deadline = wall_ms() + 120'000;
  while (wall_ms() < deadline) {
    auto s = client.stats();
    if (s && !s->empty() && s->front().done >= n + snoozed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<double> late_ms, snooze_over_ms;
  std::map<std::string, int64_t> first_start_us;
  size_t starts_before_new_due = 0;
  for (const auto& r : read_records(record)) {
    if (auto it = moved_to.find(r.id); it != moved_to.end()) {
      late_ms.push_back(static_cast<double>(r.start_us) / 1000.0 - static_cast<double>(it->second));
      if (r.start_us / 1000 < it->second) ++starts_before_new_due;
    } else if (r.id.starts_with("s-")) {
      auto [first, added] = first_start_us.emplace(r.id, r.start_us);
      if (!added) snooze_over_ms.push_back(static_cast<double>(r.start_us - first->second) / 1000.0 - kSnoozeMs);
    }
  }
  f["rescheduled"] = static_cast<double>(moved_to.size());
  f["refused"] = static_cast<double>(n - static_cast<int>(moved_to.size()));
  f["started_before_new_due"] = static_cast<double>(starts_before_new_due);
  put_percentiles(f, "reschedule_answer_ms", answer_ms);
  put_percentiles(f, "late_after_new_due_ms", late_ms);
  f["snoozed_runs_again"] = static_cast<double>(snooze_over_ms.size());
  put_percentiles(f, "snooze_overshoot_ms", snooze_over_ms);
  table.push_back({{"rescheduled", moved_to.size()}, {"reschedule_answer_p99_ms", f["reschedule_answer_ms_p99"]},
                   {"late_after_new_due_p99_ms", f["late_after_new_due_ms_p99"]},
                   {"snooze_overshoot_p99_ms", f["snooze_overshoot_ms_p99"]}});
  return f;
}

}  // namespace dueq::bench
