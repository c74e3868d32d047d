#include <atomic>
#include <thread>

#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {
constexpr int kResultWaiters = 50;
constexpr int64_t kResultsSpacingMs = 10;
}  // namespace

// Results and waiting: 2,000 jobs (200 in a smoke run) due 10 ms apart whose
// handler returns its payload as the result, each waited for
// (`Client::wait`) by one of 50 threads that wait for every 50th job in
// turn: how long after its handler started (the example worker's record,
// wall clock) each wait returned the job's end with its result. One example
// worker of 16 handlers.
Figures results(const Options& o, Json& table) {
  const int n = o.smoke ? 200 : 2'000;
  Figures f;
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("res", 16, record.string());
  if (!cluster.wait_for_workers(1)) throw std::runtime_error("results: no worker registered");
  const int64_t first_due = wall_ms() + 2'000;
  std::vector<JobSpec> jobs;
  jobs.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    jobs.push_back({.queue = "res", .type = "echo", .payload = fmt::format("result-{}", i), .id = fmt::format("w-{}", i),
                    .due_ms = first_due + i * kResultsSpacingMs});
  enqueue_all(cluster.endpoint(), jobs, 1);
  progress(fmt::format("results: {} jobs due {} ms apart, each waited for", n, kResultsSpacingMs));
  std::vector<int64_t> returned_us(static_cast<size_t>(n), 0);
  std::atomic<int> wrong{0};
  std::vector<std::thread> waiters;
  waiters.reserve(kResultWaiters);
  for (int w = 0; w < kResultWaiters; ++w)
    waiters.emplace_back([&, w] {
      Client client(cluster.endpoint());
      for (int i = w; i < n; i += kResultWaiters) {
        auto end = client.wait(jobs[static_cast<size_t>(i)].id, "res", std::chrono::seconds(60));
        returned_us[static_cast<size_t>(i)] = wall_us();
        if (!end || end->state != JobEnd::State::done || end->result != jobs[static_cast<size_t>(i)].payload) ++wrong;
      }
    });
  for (auto& t : waiters) t.join();
  std::map<std::string, int64_t> started_us;
  for (const auto& r : read_records(record)) started_us.emplace(r.id, r.start_us);
  std::vector<double> after_start_ms;
  for (int i = 0; i < n; ++i)
    if (auto it = started_us.find(jobs[static_cast<size_t>(i)].id); it != started_us.end())
      after_start_ms.push_back(static_cast<double>(returned_us[static_cast<size_t>(i)] - it->second) / 1000.0);
  f["waited"] = static_cast<double>(after_start_ms.size());
  f["wrong_or_missing"] = static_cast<double>(wrong.load() + (n - static_cast<int>(after_start_ms.size())));
  f["wait_after_start_ms_p50"] = percentile(after_start_ms, 50);
  f["wait_after_start_ms_p99"] = percentile(after_start_ms, 99);
  table.push_back({{"waited", after_start_ms.size()}, {"wait_after_start_p50_ms", f["wait_after_start_ms_p50"]},
                   {"wait_after_start_p99_ms", f["wait_after_start_ms_p99"]}, {"wrong_or_missing", f["wrong_or_missing"]}});
  return f;
}

}  // namespace dueq::bench
