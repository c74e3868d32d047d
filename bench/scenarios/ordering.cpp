#include <csignal>
#include <thread>

#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {

constexpr size_t kKeys = 1'000;
constexpr int64_t kRunMs = 2;  // each job sleeps this long: two runs of a key closer than it overlapped

// What the starts of an ordered queue's jobs say: a key's jobs first start
// in due then id order (order), a key's job starts while another of it runs
// (overlap), or a job runs again after a later job of its key took the turn
// (rerun_after_turn).
struct OrderFindings {
  size_t starts = 0, reruns = 0, order = 0, overlap = 0, rerun_after_turn = 0;
};

struct KeyedStart {
  int64_t start_us, due_ms;
  std::string id;
};

OrderFindings check_order(const std::vector<StartRecord>& records) {
  OrderFindings f;
  std::map<std::string, std::vector<KeyedStart>> by_key;  // key -> its starts
  std::set<std::string> seen;
  for (const auto& r : records) {
    ++f.starts;
    if (!seen.insert(r.id).second) ++f.reruns;
    by_key[r.id.substr(0, r.id.find('-'))].push_back({r.start_us, r.due_ms, r.id});
  }
  for (auto& [key, starts] : by_key) {
    std::sort(starts.begin(), starts.end(), [](const auto& a, const auto& b) { return a.start_us < b.start_us; });
    std::set<std::string> begun;
    const KeyedStart* last_first = nullptr;  // the latest job of the key to start for the first time
    for (size_t i = 0; i < starts.size(); ++i) {
      const auto& s = starts[i];
      if (i > 0 && starts[i - 1].id != s.id && s.start_us < starts[i - 1].start_us + kRunMs * 1000) ++f.overlap;
      if (!begun.insert(s.id).second) {
        if (last_first != nullptr && last_first->id != s.id) ++f.rerun_after_turn;
        continue;
      }
      if (last_first != nullptr && (s.due_ms < last_first->due_ms || (s.due_ms == last_first->due_ms && s.id < last_first->id)))
        ++f.order;
      last_first = &s;
    }
  }
  return f;
}

// The jobs: kKeys keys, ids "KEY-SEQ", each due at a random time over
// `spread_ms` from `from_ms`.
std::vector<JobSpec> ordered_jobs(size_t n, int64_t from_ms, int64_t spread_ms) {
  std::mt19937_64 rng(20'261'129);
  std::vector<JobSpec> jobs;
  jobs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string key = fmt::format("k{:04}", i % kKeys);
    jobs.push_back({.queue = "o", .type = "sleep", .payload = std::to_string(kRunMs), .id = fmt::format("{}-{}", key, i / kKeys),
                    .due_ms = from_ms + static_cast<int64_t>(rng() % static_cast<uint64_t>(spread_ms)), .max_attempts = 50,
                    .key = key});
  }
  return jobs;
}

}  // namespace

// 100,000 jobs (1,000 in a smoke run) of an ordered queue, 100 each of
// 1,000 keys due at random over 10 s, run by 3 example workers x 16 given
// both brokers' endpoints while a worker is SIGKILLed (and another started)
// every 2 s and the leading broker is SIGKILLed once, 4 s in (its standby
// takes over): order violations found in the starts, which must be 0.
Figures ordering(const Options& o, Json& table) {
  const size_t n = o.smoke ? 1'000 : 100'000;
  const int64_t spread_ms = o.smoke ? 3'000 : 10'000;
  const std::filesystem::path dir = make_temp_dir("bench-ordering");
  const auto config = write_config(dir, "[queues.o]\nordered = true\nmax_attempts = 50\n");
  Figures f;
  {
    Cluster cluster({"--config", config.string()});
    const std::string standby_endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
    Process standby({bin("dueq-broker"), "--redis", cluster.redis().url(), "--listen", standby_endpoint, "--config",
                     config.string(), "--log-level", "info"},
                    (cluster.dir() / "standby.log").string());
    const std::string both = cluster.endpoint() + "," + standby_endpoint;
    const auto jobs = ordered_jobs(n, wall_ms() + 3'000, spread_ms);
    progress(fmt::format("ordering: {} jobs of {} keys", n, kKeys));
    enqueue_all(cluster.endpoint(), jobs, 2);
    const auto record = cluster.dir() / "starts.txt";
    auto start_worker = [&] {
      cluster.start_worker({bin("dueq-example-worker"), "--broker", both, "--queue", "o", "--concurrency", "16",
                            "--record", record.string()});
    };
    for (int i = 0; i < 3; ++i) start_worker();
    Client client(both, ClientOptions{.timeout_ms = 2000, .attempts = 3});
    auto done = [&] {
      auto s = client.stats();
      if (!s) return int64_t{-1};
      for (const auto& q : *s)
        if (q.queue == "o") return q.done;
      return int64_t{0};
    };
    const int64_t t0 = wall_ms();
    size_t killed_workers = 0, next_victim = 0;
    bool leader_killed = false;
    while (done() < static_cast<int64_t>(n) && wall_ms() - t0 < 300'000) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      if (!leader_killed && wall_ms() - t0 >= 4'000) {
        cluster.broker().signal(SIGKILL);
        leader_killed = true;
      }
      if (done() < static_cast<int64_t>(n)) {
        cluster.worker(next_victim++).signal(SIGKILL);
        ++killed_workers;
        start_worker();
      }
    }
    const auto findings = check_order(read_records(record));
    f["jobs"] = static_cast<double>(n);
    f["done"] = static_cast<double>(done());
    f["starts"] = static_cast<double>(findings.starts);
    f["runs_again"] = static_cast<double>(findings.reruns);
    f["workers_killed"] = static_cast<double>(killed_workers);
    f["leader_killed"] = leader_killed ? 1 : 0;
    f["order_violations"] = static_cast<double>(findings.order);
    f["overlaps"] = static_cast<double>(findings.overlap);
    f["runs_again_after_a_later_job"] = static_cast<double>(findings.rerun_after_turn);
    f["seconds"] = static_cast<double>(wall_ms() - t0) / 1000.0;
    table.push_back({{"jobs", n}, {"order_violations", findings.order}, {"overlaps", findings.overlap},
                     {"runs_again_after_a_later_job", findings.rerun_after_turn}});
    standby.signal(SIGTERM);
    standby.wait();
  }
  std::filesystem::remove_all(dir);
  return f;
}

}  // namespace dueq::bench
