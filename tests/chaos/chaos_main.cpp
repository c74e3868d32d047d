// Chaos run: jobs (immediate and delayed) flow through a real Redis, broker
// and 4 workers while a seeded schedule SIGKILLs, SIGSTOPs and SIGTERMs
// workers, SIGKILLs the broker, kills Redis, and an operator cancels jobs
// and replays the dead letters. Then every accepted job is accounted for.
// Exit 0 only if jobs were accepted and run, none was lost, none ran before
// the due time its producer asked for, every done job ran, every job that
// should succeed ended done (or dead only after its deliveries were lost
// with their workers), every failing job ended dead, only jobs asked to be
// cancelled ended cancelled, no job was rejected, and `dueq audit` is clean.
// A failed run keeps its logs.
//
//   chaos_run --seed 7 --duration 10m
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/clock.hpp"
#include "common/duration.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

struct Accepted {
  int64_t due_ms = 0;  // as the producer asked (0: now)
  std::string type;
  bool cancel_asked = false;
};


}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  std::string duration_text = "30s";
  int workers_count = 4;
  CLI::App app{"chaos_run: kill things while jobs flow, then count every job"};
  app.add_option("--seed", seed, "seed of the fault schedule and the job mix");
  app.add_option("--duration", duration_text, "how long faults are injected, e.g. 45s or 10m");
  app.add_option("--workers", workers_count, "worker processes")->check(CLI::Range(2, 16));
  CLI11_PARSE(app, argc, argv);
  auto duration = parse_duration_ms(duration_text);
  if (!duration) {
    fmt::print(stderr, "--duration: {}\n", duration.error().message);
    return 2;
  }

  std::mt19937_64 rng(seed);
  // appendfsync always: a Redis SIGKILL then loses nothing, so any loss
  // counted here is dueq's own (the everysec window is documented apart).
  Cluster cluster({}, {"--appendfsync", "always"});
  const auto record = cluster.dir() / "starts.txt";
  std::vector<size_t> workers;
  workers.reserve(static_cast<size_t>(workers_count));
  for (int i = 0; i < workers_count; ++i) workers.push_back(cluster.start_example_worker("chaos", 8, record.string()));
  if (!cluster.wait_for_workers(workers_count)) {
    fmt::print(stderr, "workers did not join\n");
    return 1;
  }
  fmt::print("chaos: seed {}, {} of faults, {} workers, logs in {}\n", seed, duration_text, workers_count, cluster.dir().string());

  // Producer: batches of 20 every 50 ms; a batch is retried with the same ids
  // until the broker answers, as a careful producer would.
  std::mutex accepted_mutex;
  std::unordered_map<std::string, Accepted> accepted;
  std::atomic<bool> producing{true};
  std::atomic<int64_t> producer_retries{0}, duplicates{0}, rejected{0}, overloaded{0};
  std::thread producer([&] {
    std::mt19937_64 prng(seed * 7919 + 1);
    Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 1000, .attempts = 1});
    int64_t n = 0;
    while (producing) {
      std::vector<JobSpec> batch;
      for (int i = 0; i < 20; ++i, ++n) {
        const int kind = static_cast<int>(prng() % 100);
        JobSpec job{"chaos", "noop", "", fmt::format("c{}-{}", seed, n), 0, 3};
        if (kind < 15) {
          job.type = "sleep";
          job.payload = std::to_string(50 + prng() % 400);
        } else if (kind < 20) {
          job.type = "fail";
          job.max_attempts = 2;
        }
        if (prng() % 2 == 0) job.due_ms = wall_ms() + static_cast<int64_t>(prng() % 3000);
        batch.push_back(job);
      }
      // Retried with the same ids until every job is accepted: an unknown
      // outcome and `overloaded` are answered by trying again.
      while (!batch.empty()) {
        auto results = client.enqueue_batch(batch);
        if (!results) {
          ++producer_retries;
          std::this_thread::sleep_for(100ms);
          continue;
        }
        std::vector<JobSpec> again;
        {
          std::lock_guard lock(accepted_mutex);
          for (size_t i = 0; i < results->size(); ++i) {
            const auto& r = (*results)[i];
            if (r.status == EnqueueResult::Status::accepted || r.status == EnqueueResult::Status::duplicate) {
              accepted[r.id] = Accepted{batch[i].due_ms, batch[i].type};
              if (r.status == EnqueueResult::Status::duplicate) ++duplicates;
            } else if (r.status == EnqueueResult::Status::overloaded) {
              ++overloaded;
              again.push_back(batch[i]);
            } else {
              ++rejected;  // every job here is valid: a rejection is a bug
              fmt::print("REJECTED {}: {}\n", r.id, r.reason);
            }
          }
        }
        batch = std::move(again);
        if (!batch.empty()) std::this_thread::sleep_for(100ms);
      }
      std::this_thread::sleep_for(50ms);
    }
  });

  // Fault schedule.
  std::map<std::string, int> faults;
  // When each fault began and ended: the longest re-delivery gap is
  // explained by the faults that overlap it.
  struct FaultSpan {
    int64_t from_ms, to_ms;
    std::string name;
  };
  std::vector<FaultSpan> timeline;
  const int64_t run_start_ms = wall_ms();
  const int64_t end = run_start_ms + *duration;
  while (wall_ms() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500 + rng() % 2500));
    const size_t w = workers[rng() % workers.size()];
    const int64_t fault_start_ms = wall_ms();
    int faults_before = 0;
    for (const auto& [what, count] : faults) faults_before += count;
    const int fault_kind = static_cast<int>(rng() % 7);
    switch (fault_kind) {
      case 0:
        ++faults["worker SIGKILL"];
        cluster.worker(w).signal(SIGKILL);
        cluster.worker(w).wait();
        std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 800));
        workers[std::find(workers.begin(), workers.end(), w) - workers.begin()] =
            cluster.start_example_worker("chaos", 8, record.string());
        break;
      case 1:
        ++faults["worker SIGSTOP past its heartbeat deadline"];
        cluster.worker(w).signal(SIGSTOP);
        std::this_thread::sleep_for(2500ms);
        cluster.worker(w).signal(SIGCONT);
        break;
      case 2:
        ++faults["worker SIGTERM (drain)"];
        cluster.worker(w).signal(SIGTERM);
        cluster.worker(w).wait(40s);
        workers[std::find(workers.begin(), workers.end(), w) - workers.begin()] =
            cluster.start_example_worker("chaos", 8, record.string());
        break;
      case 3:
        ++faults["broker SIGKILL"];
        cluster.broker().signal(SIGKILL);
        cluster.broker().wait();
        std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 900));
        cluster.start_broker();
        break;
      case 4:
        ++faults["Redis SIGKILL + restart"];
        cluster.redis().kill(SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 900));
        cluster.redis().start();
        break;
      case 5: {
        // An operator cancels a job that is not due yet (it may still run
        // first: then it ends done).
        std::string id;
        {
          std::lock_guard lock(accepted_mutex);
          for (auto& [candidate, job] : accepted)
            if (job.due_ms > wall_ms() + 500 && !job.cancel_asked && rng() % 4 == 0) {
              job.cancel_asked = true;
              id = candidate;
              break;
            }
        }
        if (id.empty()) break;
        ++faults["operator cancel"];
        (void)run_dueq(cluster.endpoint(), "--timeout 5s cancel --queue chaos " + id);
        break;
      }
      case 6:
        ++faults["operator dead replay --all"];
        (void)run_dueq(cluster.endpoint(), "--timeout 10s dead replay --all --queue chaos");
        break;
    }
    static const char* const kKinds[] = {"worker SIGKILL", "worker SIGSTOP", "worker SIGTERM", "broker SIGKILL",
                                         "Redis SIGKILL + restart", "operator cancel", "operator dead replay"};
    int faults_after = 0;
    for (const auto& [what, count] : faults) faults_after += count;
    if (faults_after > faults_before) timeline.push_back({fault_start_ms, wall_ms(), kKinds[fault_kind]});
  }
  producing = false;
  producer.join();

  // Drain: wait until every accepted job has ended.
  const size_t total = accepted.size();
  const bool settled = eventually(
      [&] {
        auto s = cluster.stats("chaos");
        return s && s->scheduled == 0 && s->waiting == 0 && s->in_flight == 0;
      },
      120s);

  // Account for every job.
  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 5000, .attempts = 3});
  std::unordered_map<std::string, std::vector<StartRecord>> starts;
  for (auto& r : read_records(record)) starts[r.id].push_back(r);
  size_t done = 0, dead = 0, cancelled = 0, lost = 0, early = 0, executions = 0;
  size_t done_without_run = 0, wrong_end = 0;
  // Why jobs ran more than once: an always-failing job runs once per attempt
  // and again after each `dead replay --all`; a job that succeeds runs again
  // only when a delivery was lost (worker SIGKILL/SIGSTOP, broker SIGKILL,
  // Redis losing its last second of writes), with the same attempt number
  // unless the broker had seen that delivery start (an announced one that
  // ran alone, docs/protocol.md 3.3).
  size_t failing_runs = 0, succeeding_reruns = 0, reruns_next_attempt = 0, reruns_same_attempt = 0;
  size_t same_delivery_twice = 0;
  double max_gap_s = 0;
  std::string max_gap_job;
  int64_t max_gap_from_us = 0, max_gap_to_us = 0;
  auto wrong = [&](const std::string& id, const std::string& what) {
    ++wrong_end;
    fmt::print("WRONG {}: {}\n", id, what);
  };
  size_t lookups_failed = 0;
  for (const auto& [id, job] : accepted) {
    // A lookup that fails (Redis just restarted, a timeout) is asked again,
    // as a user would: only an answer "not found" makes a job lost.
    auto fields = client.job(id, "chaos");
    for (int retry = 0; !fields && retry < 10; ++retry) {
      std::this_thread::sleep_for(500ms);
      fields = client.job(id, "chaos");
    }
    if (!fields) {
      ++lookups_failed;
      fmt::print("LOOKUP FAILED {}: {}\n", id, fields.error().message);
      continue;
    }
    const std::string state = fields && *fields ? (**fields)["s"] : "";
    const std::string error = fields && *fields ? (**fields)["e"] : "";
    auto& runs = starts[id];
    executions += runs.size();
    if (state == "done") {
      ++done;
      if (runs.empty()) {
        ++done_without_run;
        fmt::print("DONE WITHOUT RUNNING {}\n", id);
      }
      if (job.type == "fail") wrong(id, "a job whose handler always fails ended done");
    } else if (state == "dead") {
      ++dead;
      // A lost delivery is charged only when the broker saw it start alone
      // among the announced ones: a job that should succeed never ends dead
      // for what the faults did to its workers.
      if (job.type != "fail") {
        wrong(id, "a job that should succeed ended dead: '" + error + "'");
      } else if (error.empty()) {
        wrong(id, "dead without a reason");
      }
    } else if (state == "cancelled") {
      ++cancelled;
      if (!job.cancel_asked) wrong(id, "cancelled, but nobody asked");
    } else {
      ++lost;
      fmt::print("LOST {} (state '{}')\n", id, state);
    }
    std::sort(runs.begin(), runs.end(), [](auto& a, auto& b) { return a.start_us < b.start_us; });
    for (size_t i = 0; i < runs.size(); ++i) {
      // Judged against the due time the producer asked for, not the one the
      // broker stored.
      if (runs[i].start_us < job.due_ms * 1000) {
        ++early;
        fmt::print("EARLY {}: started {} us before its due time\n", id, job.due_ms * 1000 - runs[i].start_us);
      }
      if (i > 0 && job.type != "fail") {
        if (const double gap_s = static_cast<double>(runs[i].start_us - runs[i - 1].start_us) / 1e6; gap_s > max_gap_s) {
          max_gap_s = gap_s;
          max_gap_job = id;
          max_gap_from_us = runs[i - 1].start_us;
          max_gap_to_us = runs[i].start_us;
        }
        ++succeeding_reruns;
        ++(runs[i].attempt > runs[i - 1].attempt ? reruns_next_attempt : reruns_same_attempt);
      }
      for (size_t j = 0; j < i; ++j)
        if (runs[j].token == runs[i].token) ++same_delivery_twice;
    }
    if (job.type == "fail") failing_runs += runs.size();
  }
  const int audit = run_dueq(cluster.endpoint(), "audit").code;
  auto stats = cluster.stats("chaos");

  fmt::print("faults:");
  for (const auto& [what, count] : faults) fmt::print(" {} x{};", what, count);
  fmt::print("\naccepted {}, done {}, dead {}, cancelled {}, lost {}, early {}, "
             "done without running {}, wrong ends {}, rejected {}, lookups failed {}\n",
             total, done, dead, cancelled, lost, early, done_without_run, wrong_end,
             rejected.load(), lookups_failed);
  fmt::print("executions {} (duplicate executions {}), stale acks rejected {}, producer retries {} "
             "(answered duplicate {}, overloaded {}), max re-delivery gap {:.2f} s, audit {}\n",
             executions, executions - std::min(executions, total), stats ? stats->stale_acks : -1,
             producer_retries.load(), duplicates.load(), overloaded.load(), max_gap_s,
             audit == 0 ? "clean" : "VIOLATIONS");
  if (!max_gap_job.empty()) {
    // Seconds from the start of the fault schedule.
    auto at = [&](int64_t ms) { return static_cast<double>(ms - run_start_ms) / 1000.0; };
    fmt::print("longest gap: job {} started at {:.2f} s and again at {:.2f} s; faults overlapping it:", max_gap_job,
               at(max_gap_from_us / 1000), at(max_gap_to_us / 1000));
    for (const auto& f : timeline)
      if (f.to_ms >= max_gap_from_us / 1000 && f.from_ms <= max_gap_to_us / 1000)
        fmt::print(" {} {:.2f}-{:.2f} s;", f.name, at(f.from_ms), at(f.to_ms));
    fmt::print("\n");
  }
  fmt::print("why jobs ran more than once: always-failing jobs ran {} times (once per attempt, again after each "
             "replay); jobs that succeed ran again {} times after a lost delivery ({} with the next attempt number, "
             "{} with the same: not seen to start, or rolled back); one delivery run twice: {}\n",
             failing_runs, succeeding_reruns, reruns_next_attempt, reruns_same_attempt, same_delivery_twice);
  const bool ok = settled && total > 0 && done > 0 && lost == 0 && lookups_failed == 0 && early == 0 && done_without_run == 0 &&
                  wrong_end == 0 && rejected == 0 && audit == 0 && done + dead + cancelled == total;
  fmt::print("chaos: {}\n", ok ? "PASS" : "FAIL");
  if (!ok) {
    cluster.keep_dir();
    fmt::print("logs kept in {}\n", cluster.dir().string());
  }
  return ok ? 0 : 1;
}
