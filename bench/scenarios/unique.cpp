#include <atomic>
#include <thread>

#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {

// Bulk enqueue of 100,000 jobs (1,000 in a smoke run) into a fresh queue,
// each with a unique key of its own held until done or none: jobs/s.
double bulk_enqueue(const Options& o, bool unique) {
  const size_t n = o.smoke ? 1'000 : 100'000;
  Cluster cluster;
  std::vector<JobSpec> jobs = noop_jobs(n, "u", wall_ms() + 3'600'000);
  for (size_t i = 0; unique && i < n; ++i) {
    jobs[i].unique_key = fmt::format("unique-{}", i);
    jobs[i].unique_until = UniqueUntil::done;
  }
  progress(fmt::format("unique: {} jobs enqueued, {}", n, unique ? "each with a unique key" : "no unique key"));
  return enqueue_all(cluster.endpoint(), jobs, 2);
}

// The dedup race: 4 producers ask for a job of one unique key (held for a
// period) as fast as they are answered, for 10 s (2 s smoke), due now or
// 50 ms later (racing the lease at enqueue and the promotion), while a
// worker runs what is accepted. Each hold keeps the key for a period of
// Redis's time, so at most one job a period gets in: the accepted jobs
// against that bound (the whole periods between the first ask and the last
// answer, plus one), and the accepted jobs that did not run exactly once.
Figures dedup_race(const Options& o) {
  constexpr int64_t kPeriodMs = 100;
  const int64_t run_ms = o.smoke ? 2'000 : 10'000;
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "race", "--concurrency", "8",
                        "--record", record.string()});
  cluster.wait_for_workers(1);
  progress(fmt::format("unique: 4 producers racing for one unique key, period {} ms, {} ms", kPeriodMs, run_ms));
  std::atomic<int64_t> asked{0}, accepted{0};
  const int64_t begin_ms = wall_ms(), end_ms = begin_ms + run_ms;
  std::vector<std::thread> producers;
  producers.reserve(4);
  for (int p = 0; p < 4; ++p)
    producers.emplace_back([&, p] {
      Client client(cluster.endpoint());
      for (int64_t i = 0; wall_ms() < end_ms; ++i) {
        JobSpec job{.queue = "race", .type = "noop", .id = fmt::format("p{}-{}", p, i), .due_ms = i % 2 == 0 ? 0 : wall_ms() + 50,
                    .unique_key = "edge", .unique_until = UniqueUntil::period, .unique_for_ms = kPeriodMs};
        auto r = client.enqueue(std::move(job));
        ++asked;
        if (r && r->status == EnqueueResult::Status::accepted) ++accepted;
      }
    });
  for (auto& t : producers) t.join();
  const int64_t bound = (wall_ms() - begin_ms) / kPeriodMs + 1;
  await([&] { return done_count(cluster, "race") >= accepted.load(); }, 30s);
  std::map<std::string, int> runs;
  for (const auto& s : read_records(record)) ++runs[s.id];
  double not_once = static_cast<double>(accepted.load()) - static_cast<double>(runs.size());
  for (const auto& [id, n] : runs) not_once += n != 1 ? 1 : 0;
  return {{"race_asked", static_cast<double>(asked.load())},
          {"race_accepted", static_cast<double>(accepted.load())},
          {"race_accepted_at_most", static_cast<double>(bound)},
          {"race_not_run_once", not_once}};
}

}  // namespace

// What a unique key costs a bulk enqueue, and the dedup race at the due
// edge (docs/keys.md, "Unique jobs").
Figures unique_jobs(const Options& o, Json&) {
  Figures f;
  f["plain_enqueue_jobs_per_s"] = bulk_enqueue(o, false);
  f["unique_enqueue_jobs_per_s"] = bulk_enqueue(o, true);
  f["ratio_unique_enqueue"] = f["unique_enqueue_jobs_per_s"] / f["plain_enqueue_jobs_per_s"];
  for (auto& [name, value] : dedup_race(o)) f[name] = value;
  return f;
}

}  // namespace dueq::bench
