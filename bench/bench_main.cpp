// dueq-bench: measures the performance targets of DESIGN.md on this machine.
// Every scenario starts its own redis-server (AOF everysec, noeviction), a
// broker and worker processes, runs several times, and reports medians with
// their min-max spread next to a baseline measured in the same run.
//
//   dueq-bench                      all scenarios, 3 runs each
//   dueq-bench --scenario lateness  one scenario
//   dueq-bench --smoke              small sizes, one run: checks the driver works
#include <sys/utsname.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <fstream>
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <functional>
#include <thread>

#include "broker/redis_connection.hpp"
#include "common/build_info.hpp"
#include "common/curve.hpp"
#include "common/clock.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;
using Json = nlohmann::json;

namespace {

struct Options {
  bool smoke = false;
  int runs = 3;
  std::string plot_data;  // lateness samples of the last run go here
  double latency_rate = 0;  // jobs/s for the latency scenario; 0 = half the measured steady maximum
  std::string peers_dir = DUEQ_SOURCE_DIR "/bench/peers";  // bullmq_bench.js and its node_modules
  std::vector<std::string> single_modes = {"clients", "threads", "async", "callbacks"};  // the single scenario's producers
};

// Figures of one run, by name.
using Figures = std::map<std::string, double>;

// A scenario whose jobs do not all finish has no figures: waiting longer
// than the generous limit means jobs were lost or stuck, which fails the run.
template <typename F>
void await(F condition, std::chrono::milliseconds timeout, std::chrono::milliseconds every = 20ms,
           std::source_location where = std::source_location::current()) {
  if (!eventually(condition, timeout, every))
    throw std::runtime_error(fmt::format("the wait at bench_main.cpp:{} ran past {} s", where.line(), timeout.count() / 1000));
}

// How a scenario's broker listens and its clients and workers reach it:
// plaintext (all empty), or CurveZMQ keys (CurveKeys::link()).
struct Link {
  std::vector<std::string> broker_args;
  ClientOptions client;  // producers
  ClientOptions admin;   // stats probes
  std::vector<std::string> worker_args;
};

ClientOptions with_timeouts(ClientOptions options) {
  options.timeout_ms = 30'000;
  options.attempts = 3;
  return options;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
}

void progress(const std::string& text) { fmt::print(stderr, "  .. {}\n", text); }

// One integer field of INFO (0 when absent).
int64_t info_field(RedisServer& redis, const std::string& section, const std::string& field) {
  const std::string info = redis.cli("INFO " + section);
  const auto pos = info.find("\n" + field + ":");
  return pos == std::string::npos ? 0 : std::stoll(info.substr(pos + field.size() + 2));
}

int64_t used_memory(RedisServer& redis) { return info_field(redis, "memory", "used_memory"); }

// Baselines on the same machine: one Redis round trip, and pipelined INCRs.
Figures redis_baselines(RedisServer& redis) {
  auto conn = broker::RedisConnection::connect(*parse_redis_url(redis.url()), 5000);
  Figures f;
  if (!conn) return f;
  const int pings = 5000;
  int64_t t0 = wall_us();
  for (int i = 0; i < pings; ++i) (void)conn->run(broker::Command{"PING"});
  f["redis_round_trip_us"] = static_cast<double>(wall_us() - t0) / pings;
  std::vector<broker::Command> batch(1000, broker::Command{"INCR", "bench:counter"});
  t0 = wall_us();
  for (int i = 0; i < 100; ++i) (void)conn->pipeline(batch);
  f["redis_pipelined_incr_per_s"] = 100'000 / (static_cast<double>(wall_us() - t0) / 1e6);
  return f;
}

// Enqueues `jobs` with `producers` threads in batches of 1,000; returns jobs/s.
double enqueue_all(const std::string& endpoint, const std::vector<JobSpec>& jobs, int producers, const Link& link = {}) {
  std::atomic<size_t> next{0};
  const int64_t t0 = wall_us();
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&] {
      Client client(endpoint, with_timeouts(link.client));
      while (true) {
        const size_t start = next.fetch_add(1000);
        if (start >= jobs.size()) return;
        std::vector<JobSpec> batch(jobs.begin() + start, jobs.begin() + std::min(jobs.size(), start + 1000));
        auto r = client.enqueue_batch(std::move(batch));
        if (!r) fmt::print(stderr, "enqueue failed: {}\n", r.error().message);
      }
    });
  for (auto& t : threads) t.join();
  return jobs.size() / (static_cast<double>(wall_us() - t0) / 1e6);
}

std::vector<JobSpec> noop_jobs(size_t n, const std::string& queue, int64_t due_ms = 0, size_t payload = 0) {
  std::vector<JobSpec> jobs;
  jobs.reserve(n);
  for (size_t i = 0; i < n; ++i) jobs.push_back({queue, "noop", std::string(payload, 'x'), "", due_ms, 0});
  return jobs;
}

int64_t done_count(Cluster& cluster, const std::string& queue) {
  auto s = cluster.stats(queue);
  return s ? s->done : -1;
}

// CPU time (user + system) a process has used so far, in microseconds.
int64_t cpu_us(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * 1'000'000 / ::sysconf(_SC_CLK_TCK);
}

// Where a cluster's CPU goes: Redis, the broker, all workers, and this
// process (the producers and their client).
struct CpuSplit {
  int64_t redis = 0, broker = 0, workers = 0, client = 0;
  static CpuSplit of(Cluster& cluster) {
    CpuSplit s{cpu_us(cluster.redis().pid()), cpu_us(cluster.broker().pid()), 0, cpu_us(::getpid())};
    for (size_t i = 0; i < cluster.worker_count(); ++i) s.workers += cpu_us(cluster.worker(i).pid());
    return s;
  }
  // CPU microseconds per job of each part between `before` and `after`.
  static void per_job(const CpuSplit& before, const CpuSplit& after, int64_t jobs, const std::string& prefix,
                      Figures& f) {
    const double n = static_cast<double>(std::max<int64_t>(jobs, 1));
    f[prefix + "cpu_us_per_job_redis"] = static_cast<double>(after.redis - before.redis) / n;
    f[prefix + "cpu_us_per_job_broker"] = static_cast<double>(after.broker - before.broker) / n;
    f[prefix + "cpu_us_per_job_workers"] = static_cast<double>(after.workers - before.workers) / n;
    f[prefix + "cpu_us_per_job_client"] = static_cast<double>(after.client - before.client) / n;
  }
};

// Producers keep `queue` fed (at most `window` jobs waiting) for `seconds`
// while the workers drain it; returns completed jobs/s over the window.
double steady(Cluster& cluster, const std::string& queue, double seconds, const Link& link = {}) {
  constexpr int producers = 2;
  constexpr int64_t window = 20'000;
  std::atomic<bool> running{true};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&] {
      Client client(cluster.endpoint(), with_timeouts(link.client));
      Client probe(cluster.endpoint(), with_timeouts(link.admin));
      while (running) {
        auto s = probe.stats();
        int64_t backlog = 0;
        if (s)
          for (const auto& q : *s)
            if (q.queue == queue) backlog = q.waiting + q.in_flight;
        if (backlog > window) {
          std::this_thread::sleep_for(1ms);
          continue;
        }
        (void)client.enqueue_batch(noop_jobs(1000, queue));
      }
    });
  std::this_thread::sleep_for(1s);  // warm-up
  const int64_t d0 = done_count(cluster, queue), t0 = wall_us();
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  const int64_t d1 = done_count(cluster, queue), t1 = wall_us();
  running = false;
  for (auto& t : threads) t.join();
  return (d1 - d0) / (static_cast<double>(t1 - t0) / 1e6);
}

// Workers buffer up to 500 jobs beyond their concurrency: with no-op handlers
// the pipeline must be deep enough to cover a broker round trip.
void start_workers(Cluster& cluster, const std::string& queue, int count, int concurrency, const std::string& record = "",
                   const Link& link = {}) {
  for (int i = 0; i < count; ++i) {
    std::vector<std::string> argv = {bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", queue,
                                     "--concurrency", std::to_string(concurrency), "--prefetch", "500"};
    argv.insert(argv.end(), link.worker_args.begin(), link.worker_args.end());
    if (!record.empty()) {
      argv.push_back("--record");
      argv.push_back(record);
    }
    cluster.start_worker(argv);
  }
}

// ---------------------------------------------------------------- scenarios

// Bulk (n jobs enqueued, then drained) and steady throughput on one fresh
// cluster of `workers` processes.
Figures bulk_and_steady(const Options& o, int workers, int concurrency, const Link& link = {}) {
  const size_t n = o.smoke ? 20'000 : 200'000;
  const double steady_s = o.smoke ? 2 : 20;
  Cluster cluster(link.broker_args, {}, link.admin);
  Figures f = redis_baselines(cluster.redis());
  progress(fmt::format("throughput: {} workers x {}: enqueueing {} jobs", workers, concurrency, n));
  f["bulk_enqueue_jobs_per_s"] = enqueue_all(cluster.endpoint(), noop_jobs(n, "bulk"), 2, link);
  // Processing is timed from the first completed job (so worker start-up is
  // not counted) to the last.
  start_workers(cluster, "bulk", workers, concurrency, "", link);
  int64_t d0 = 0, t0 = 0;
  await([&] {
    d0 = done_count(cluster, "bulk");
    t0 = wall_us();
    return d0 > 0;
  }, 60s, 1ms);
  await([&] { return done_count(cluster, "bulk") >= static_cast<int64_t>(n); }, 300s);
  f["bulk_process_jobs_per_s"] = (n - d0) / (static_cast<double>(wall_us() - t0) / 1e6);
  cluster.wait_for_workers(workers);
  start_workers(cluster, "steady", workers, concurrency, "", link);
  cluster.wait_for_workers(2 * workers);
  progress(fmt::format("throughput: {} workers x {}: steady for {} s", workers, concurrency, steady_s));
  f["steady_jobs_per_s"] = steady(cluster, "steady", steady_s, link);
  return f;
}

Figures throughput(const Options& o, Json& table) {
  const std::vector<std::pair<int, int>> configs = o.smoke ? std::vector<std::pair<int, int>>{{2, 32}}
                                                           : std::vector<std::pair<int, int>>{{1, 64}, {2, 32}, {4, 16}};
  Figures best;
  for (const auto& [workers, concurrency] : configs) {
    Figures f = bulk_and_steady(o, workers, concurrency);
    table.push_back({{"workers", workers}, {"concurrency", concurrency}, {"bulk_enqueue_jobs_per_s", f["bulk_enqueue_jobs_per_s"]},
                     {"bulk_process_jobs_per_s", f["bulk_process_jobs_per_s"]}, {"steady_jobs_per_s", f["steady_jobs_per_s"]}});
    for (const char* k : {"bulk_enqueue_jobs_per_s", "bulk_process_jobs_per_s", "steady_jobs_per_s"}) best[k] = std::max(best[k], f[k]);
    best["redis_pipelined_incr_per_s"] = f["redis_pipelined_incr_per_s"];
    best["redis_round_trip_us"] = f["redis_round_trip_us"];
  }
  best["ratio_process_to_pipelined_incr"] = best["bulk_process_jobs_per_s"] / best["redis_pipelined_incr_per_s"];
  return best;
}

Figures lateness(const Options& o, Json&) {
  const size_t n = o.smoke ? 2'000 : 20'000;
  const int64_t spread_ms = o.smoke ? 2'000 : 10'000;
  Cluster cluster;
  Figures f = redis_baselines(cluster.redis());
  const auto record = cluster.dir() / "starts.txt";
  start_workers(cluster, "timers", 4, 16, record.string());
  cluster.wait_for_workers(4);
  const int64_t base = wall_ms() + 2'000;
  std::vector<JobSpec> jobs;
  for (size_t i = 0; i < n; ++i) jobs.push_back({"timers", "noop", "", "", base + static_cast<int64_t>(i) * spread_ms / static_cast<int64_t>(n), 0});
  progress(fmt::format("lateness: {} timers over {} ms", n, spread_ms));
  enqueue_all(cluster.endpoint(), jobs, 2);
  await([&] { return done_count(cluster, "timers") >= static_cast<int64_t>(n); }, 120s);
  std::vector<double> late;
  double early = 0;
  for (const auto& r : read_records(record)) {
    const double ms = static_cast<double>(r.start_us - r.due_ms * 1000) / 1000.0;
    if (ms < 0) ++early;
    late.push_back(ms);
  }
  if (!o.plot_data.empty()) {
    // Sorted lateness samples, for bench/plot-lateness.sh.
    std::sort(late.begin(), late.end());
    std::ofstream data(o.plot_data);
    for (size_t i = 0; i < late.size(); ++i) data << late[i] << " " << (i + 1.0) / late.size() << "\n";
  }
  f["p50_ms"] = percentile(late, 50);
  f["p99_ms"] = percentile(late, 99);
  f["p999_ms"] = percentile(late, 99.9);
  f["max_ms"] = percentile(late, 100);
  f["early"] = early;
  f["started"] = static_cast<double>(late.size());
  return f;
}

// Sends `rate` single-batch jobs per second (a batch each millisecond) to
// `queue`, stamped with their enqueue time, until `until` says stop; returns
// how many it sent.
size_t paced_flow(Client& client, const std::string& queue, double rate, const std::function<bool()>& until) {
  const int per_ms = std::max(1, static_cast<int>(rate / 1000));
  int64_t next = wall_us();
  size_t sent = 0;
  while (!until()) {
    std::vector<JobSpec> batch;
    const std::string stamp = std::to_string(wall_us());
    for (int i = 0; i < per_ms; ++i) batch.push_back({queue, "noop", stamp, "", 0, 0});
    (void)client.enqueue_batch(std::move(batch));
    sent += per_ms;
    next += 1000;
    const int64_t wait = next - wall_us();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::microseconds(wait));
  }
  return sent;
}

Figures latency_run(const Options& o, double rate, int workers, int concurrency, const Link& link = {}) {
  const double seconds = o.smoke ? 2 : 10;
  Cluster cluster(link.broker_args, {}, link.admin);
  Figures f = redis_baselines(cluster.redis());
  const auto record = cluster.dir() / "starts.txt";
  start_workers(cluster, "lat", workers, concurrency, record.string(), link);
  cluster.wait_for_workers(workers);
  progress(fmt::format("latency: {} workers x {}: {:.0f} jobs/s for {} s", workers, concurrency, rate, seconds));
  Client client(cluster.endpoint(), with_timeouts(link.client));
  const int64_t end = wall_us() + static_cast<int64_t>(seconds * 1e6);
  const size_t sent = paced_flow(client, "lat", rate, [&] { return wall_us() >= end; });
  await([&] { return done_count(cluster, "lat") >= static_cast<int64_t>(sent); }, 60s);
  std::vector<double> ms;
  for (const auto& r : read_records(record))
    if (r.payload != "-") ms.push_back(static_cast<double>(r.start_us - std::stoll(r.payload)) / 1000.0);
  f["rate_jobs_per_s"] = rate;
  f["p50_ms"] = percentile(ms, 50);
  f["p99_ms"] = percentile(ms, 99);
  f["p999_ms"] = percentile(ms, 99.9);
  return f;
}

// The figures are those of one worker process with 64 handler threads: at
// half load one process has the capacity (its steady maximum is above the
// rate), and on 2 cores every further process adds context switches to each
// job's path. The table has the 2- and 4-process runs next to it.
Figures latency(const Options& o, Json& table, double rate) {
  const std::vector<std::pair<int, int>> configs = o.smoke ? std::vector<std::pair<int, int>>{{1, 64}}
                                                           : std::vector<std::pair<int, int>>{{1, 64}, {2, 32}, {4, 16}};
  Figures reported;
  for (const auto& [workers, concurrency] : configs) {
    Figures f = latency_run(o, rate, workers, concurrency);
    table.push_back({{"workers", workers}, {"concurrency", concurrency}, {"rate_jobs_per_s", rate},
                     {"p50_ms", f["p50_ms"]}, {"p99_ms", f["p99_ms"]}, {"p999_ms", f["p999_ms"]}});
    if (workers == 1) {
      reported = f;
      reported["workers"] = workers;
      reported["concurrency"] = concurrency;
    }
  }
  return reported;
}

Figures recovery(const Options& o, Json&) {
  const int n = o.smoke ? 100 : 1000;
  Cluster cluster;
  Figures f = redis_baselines(cluster.redis());
  const auto record = cluster.dir() / "starts.txt";
  start_workers(cluster, "rec", 1, n, record.string());
  cluster.wait_for_workers(1);
  std::vector<JobSpec> jobs;
  for (int i = 0; i < n; ++i) jobs.push_back({"rec", "sleep", "120000", "", 0, 5});
  enqueue_all(cluster.endpoint(), jobs, 1);
  await([&] { return read_records(record).size() >= static_cast<size_t>(n); }, 60s);
  start_workers(cluster, "rec", 1, n, record.string());
  cluster.wait_for_workers(2);
  progress(fmt::format("recovery: SIGKILL of a worker holding {} jobs", n));
  const int64_t killed = wall_us();
  cluster.worker(0).signal(SIGKILL);
  // The broker never saw these jobs start (a first delivery is not
  // announced), so they come back without an attempt charged: a restart is
  // a second start record of the same id, after the kill.
  std::map<std::string, int64_t> restarted;  // id -> first start after the kill
  const auto collect = [&] {
    restarted.clear();
    for (const auto& r : read_records(record))
      if (r.start_us >= killed && !restarted.contains(r.id)) restarted[r.id] = r.start_us;
    return restarted.size() >= static_cast<size_t>(n);
  };
  await(collect, 60s);
  std::vector<double> delays;
  for (const auto& [id, start_us] : restarted) delays.push_back(static_cast<double>(start_us - killed) / 1e6);
  f["p50_s"] = percentile(delays, 50);
  f["p99_s"] = percentile(delays, 99);
  f["max_s"] = percentile(delays, 100);
  return f;
}

// Idempotency at the top steady rate. A job finishes; then its queue runs
// flat out for 15 s (the client's resend span) with done_max far below what
// finishes meanwhile, and a resend of that job, as after a lost reply, must
// be answered duplicate (the scenario fails otherwise). The done set's
// measured size per id gives what the 30 s default window costs at this rate.
Figures duplicate_window(const Options& o, Json&) {
  const int64_t flow_ms = o.smoke ? 3'000 : 15'000;
  const auto config = make_temp_dir("bench-window");
  std::ofstream(config / "broker.toml") << "[queues.dup]\ndone_max = 10000\n";
  Cluster cluster({"--config", (config / "broker.toml").string()});
  std::filesystem::remove_all(config);
  start_workers(cluster, "dup", 2, 32);
  cluster.wait_for_workers(2);
  const JobSpec first{"dup", "noop", "", "first-of-the-window", 0, 3};
  {
    Client client(cluster.endpoint(), with_timeouts({}));
    auto accepted = client.enqueue(first);
    if (!accepted || accepted->status != EnqueueResult::Status::accepted) throw std::runtime_error("the first job was not accepted");
  }
  await([&] { return done_count(cluster, "dup") >= 1; }, 30s);
  const int64_t finished_ms = wall_ms();
  progress(fmt::format("duplicate window: flat out for {} s after the first job finished", flow_ms / 1000));
  Figures f = redis_baselines(cluster.redis());
  // steady() warms up for 1 s before its measured window.
  f["steady_jobs_per_s"] = steady(cluster, "dup", static_cast<double>(flow_ms - 1'000 - (wall_ms() - finished_ms)) / 1000);
  Client resender(cluster.endpoint(), with_timeouts({}));
  auto again = resender.enqueue(first);
  f["resend_after_s"] = static_cast<double>(wall_ms() - finished_ms) / 1000;
  if (!again) throw std::runtime_error("the resend failed: " + again.error().message);
  if (again->status == EnqueueResult::Status::accepted) {
    cluster.keep_dir();
    throw std::runtime_error(fmt::format("a resend {:.1f} s after the job finished made a second job (done set: {} ids, "
                                         "its oldest {}; logs in {})",
                                         f["resend_after_s"], cluster.redis().cli("ZCARD 'dueq:{dup}:done'"),
                                         cluster.redis().cli("ZRANGE 'dueq:{dup}:done' 0 0 WITHSCORES"), cluster.dir().string()));
  }
  if (again->status != EnqueueResult::Status::duplicate)
    throw std::runtime_error(fmt::format("the resend was not answered: {} (status {})", again->reason,
                                         static_cast<int>(again->status)));
  f["finished_since"] = static_cast<double>(done_count(cluster, "dup") - 1);
  const double ids = std::stod(cluster.redis().cli("ZCARD 'dueq:{dup}:done'"));
  const double bytes = std::stod(cluster.redis().cli("MEMORY USAGE 'dueq:{dup}:done' SAMPLES 0"));
  f["done_set_ids"] = ids;
  f["done_set_mib"] = bytes / (1 << 20);
  f["bytes_per_id"] = bytes / ids;
  f["default_window_mib_at_this_rate"] = f["steady_jobs_per_s"] * 30 * f["bytes_per_id"] / (1 << 20);
  return f;
}

Figures memory(const Options& o, Json&) {
  const size_t n = o.smoke ? 50'000 : 1'000'000;
  Cluster cluster;
  Figures f;
  // Baseline: the same number of 26-byte members in one plain sorted set, the
  // least any sorted-set schedule needs.
  const int64_t m0 = used_memory(cluster.redis());
  {
    auto conn = broker::RedisConnection::connect(*parse_redis_url(cluster.redis().url()), 5000);
    for (size_t i = 0; i < n; i += 1000) {
      std::vector<broker::Command> batch;
      for (size_t j = i; j < std::min(n, i + 1000); ++j)
        batch.push_back(broker::Command{"ZADD", "bench:zset", std::to_string(j), fmt::format("{:026}", j)});
      (void)conn->pipeline(batch);
    }
  }
  const int64_t m1 = used_memory(cluster.redis());
  cluster.redis().cli("DEL bench:zset");
  const int64_t m2 = used_memory(cluster.redis());
  progress(fmt::format("memory: {} delayed jobs with 100-byte payloads", n));
  enqueue_all(cluster.endpoint(), noop_jobs(n, "mem", wall_ms() + 86'400'000, 100), 2);
  const int64_t m3 = used_memory(cluster.redis());
  f["bytes_per_job"] = static_cast<double>(m3 - m2) / n;
  f["baseline_zset_bytes_per_member"] = static_cast<double>(m1 - m0) / n;
  // A finished job leaves its id in the done set for done_retention (at most
  // done_max of them): what a sustained rate costs Redis.
  const size_t finished = o.smoke ? 20'000 : 500'000;
  progress(fmt::format("memory: {} finished jobs kept as done ids", finished));
  enqueue_all(cluster.endpoint(), noop_jobs(finished, "finished", 0, 100), 2);
  start_workers(cluster, "finished", 2, 8);
  await([&] { return done_count(cluster, "finished") >= static_cast<int64_t>(finished); }, 300s);
  const std::string done_bytes = cluster.redis().cli("MEMORY USAGE 'dueq:{finished}:done' SAMPLES 0");
  f["bytes_per_done_job"] = std::stod(done_bytes.empty() ? "0" : done_bytes) / finished;
  return f;
}

Figures backlog(const Options& o, Json&) {
  const size_t n = o.smoke ? 50'000 : 1'000'000;
  const double seconds = o.smoke ? 2 : 10;
  Figures f;
  for (const bool loaded : {false, true}) {
    Cluster cluster;
    if (loaded) {
      progress(fmt::format("backlog: scheduling {} jobs far in the future", n));
      enqueue_all(cluster.endpoint(), noop_jobs(n, "steady", wall_ms() + 86'400'000, 100), 2);
    }
    start_workers(cluster, "steady", 2, 32);
    cluster.wait_for_workers(2);
    progress(fmt::format("backlog: steady for {} s ({} store)", seconds, loaded ? "loaded" : "empty"));
    f[loaded ? "steady_loaded_jobs_per_s" : "steady_empty_jobs_per_s"] = steady(cluster, "steady", seconds);
  }
  f["ratio"] = f["steady_loaded_jobs_per_s"] / f["steady_empty_jobs_per_s"];
  return f;
}

// A full `dueq audit` (every queue, every job) of a store holding 1,000,000
// scheduled jobs in 100 queues while 20,000 jobs/s flow through another
// queue: enqueue-to-start p99 of the jobs sent while the audit ran, beside
// the same flow without it, and whether any worker or lease lapsed.
Figures audit_under_load(const Options& o, Json&) {
  const size_t n = o.smoke ? 20'000 : 1'000'000;
  const int queues = o.smoke ? 5 : 100;
  const double rate = o.smoke ? 2'000 : 20'000;
  const double quiet_s = o.smoke ? 2 : 10;
  Cluster cluster;
  {
    // The reconciler would start audits of its own: off, so that the
    // measured phases are with and without exactly one audit.
    const auto config = cluster.dir() / "broker.toml";
    std::ofstream(config) << "reconcile_interval = 0\n";
    cluster.broker().signal(SIGTERM);
    cluster.broker().wait();
    cluster.start_broker({"--config", config.string()});
  }
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
  size_t sent = paced_flow(client, "flow", rate, [end = wall_us() + 5'000'000] { return wall_us() >= end; });
  // At this volume Redis rewrites its AOF every minute or so: a fork of a
  // 1.7 GB process (a stall of up to a few hundred ms), then a child that
  // competes for the cores for tens of seconds. Such rewrites landed in the
  // minutes-long audit phase and not in the 10 s without it, and made the
  // p99 ratio measure them rather than the audit: automatic rewrites are off
  // for both phases (after any running one ends), and forks are counted.
  await([&] {
    return info_field(cluster.redis(), "persistence", "aof_rewrite_in_progress") == 0 &&
           info_field(cluster.redis(), "persistence", "aof_rewrite_scheduled") == 0;
  }, 300s);
  cluster.redis().cli("CONFIG SET auto-aof-rewrite-percentage 0");
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

  std::vector<double> quiet, during;
  for (const auto& r : read_records(record)) {
    if (r.payload == "-") continue;
    const int64_t stamp = std::stoll(r.payload);
    const double ms = static_cast<double>(r.start_us - stamp) / 1000.0;
    if (stamp >= quiet_start && stamp < quiet_end) quiet.push_back(ms);
    else if (stamp >= audit_start && stamp < audit_end) during.push_back(ms);
  }
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

// One producer process enqueueing one job per call with 50 requests
// outstanding, while 2 workers x 32 with the default prefetch run them: the
// path most applications take (issue 14). Four ways to keep 50 outstanding:
// 50 Clients with a thread each (all the blocking-only client allowed), 50
// threads sharing one Client, one thread with 50 enqueue_async futures, and
// 50 chains of enqueue_async callbacks, each answer sending the next request
// from the client's I/O thread (an event loop's way, and the BullMQ
// harness's: 50 awaits on Node's one loop).
// Figures: jobs completed per second over the window, the enqueue call's
// latency, and where the CPU went per job (Redis, broker, workers, client).
Figures single_job(const Options& o, Json& table, const std::vector<std::string>& modes) {
  const double seconds = o.smoke ? 2 : 10;
  constexpr int kOutstanding = 50;
  Figures f;
  for (const std::string& mode : modes) {
    Cluster cluster;
    for (int i = 0; i < 2; ++i)
      cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "single", "--concurrency", "32"});
    cluster.wait_for_workers(2);
    progress(fmt::format("single: {} with {} outstanding for {} s", mode, kOutstanding, seconds));
    std::atomic<bool> running{true};
    std::mutex latencies_mutex;
    std::vector<double> latencies_ms;
    auto keep = [&](std::vector<double>& mine) {
      std::lock_guard lock(latencies_mutex);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
    };
    const JobSpec job{"single", "noop", std::string(100, 'x'), "", 0, 0};
    std::vector<std::thread> threads;
    std::optional<Client> shared;
    if (mode != "clients") shared.emplace(cluster.endpoint(), with_timeouts({}));
    // The callbacks mode's chains: each answer is counted and sends the
    // next request, on the client's I/O thread, until `running` ends. A
    // chain sends its next request before it counts itself out, so the
    // count reaches 0 once, when the last chain has ended.
    std::vector<double> callback_latencies_ms;  // the I/O thread's until chains_ended
    std::atomic<int> chains{0};
    std::promise<void> chains_ended;
    std::function<void()> send_next = [&] {
      chains.fetch_add(1);
      shared->enqueue_async(job, [&, sent_us = wall_us()](const std::expected<EnqueueResult, ClientError>&) {
        callback_latencies_ms.push_back(static_cast<double>(wall_us() - sent_us) / 1000.0);
        if (running) send_next();
        if (chains.fetch_sub(1) == 1) chains_ended.set_value();
      });
    };
    if (mode == "callbacks") {
      for (int i = 0; i < kOutstanding; ++i) send_next();
    } else if (mode == "async") {
      threads.emplace_back([&] {
        std::vector<double> mine;
        std::deque<std::pair<int64_t, std::future<std::expected<EnqueueResult, ClientError>>>> window;
        while (running || !window.empty()) {
          while (running && window.size() < kOutstanding) window.emplace_back(wall_us(), shared->enqueue_async(job));
          (void)window.front().second.get();
          mine.push_back(static_cast<double>(wall_us() - window.front().first) / 1000.0);
          window.pop_front();
        }
        keep(mine);
      });
    } else {
      for (int t = 0; t < kOutstanding; ++t)
        threads.emplace_back([&] {
          std::optional<Client> own;
          if (mode == "clients") own.emplace(cluster.endpoint(), with_timeouts({}));
          Client& client = mode == "clients" ? *own : *shared;
          std::vector<double> mine;
          while (running) {
            const int64_t t0 = wall_us();
            (void)client.enqueue(job);
            mine.push_back(static_cast<double>(wall_us() - t0) / 1000.0);
          }
          keep(mine);
        });
    }
    std::this_thread::sleep_for(1s);  // warm-up
    const int64_t d0 = done_count(cluster, "single"), t0 = wall_us();
    const CpuSplit cpu0 = CpuSplit::of(cluster);
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
    const CpuSplit cpu1 = CpuSplit::of(cluster);
    const int64_t d1 = done_count(cluster, "single"), t1 = wall_us();
    CpuSplit::per_job(cpu0, cpu1, d1 - d0, mode + "_", f);
    running = false;
    for (auto& t : threads) t.join();
    if (mode == "callbacks") {
      chains_ended.get_future().wait();
      keep(callback_latencies_ms);
    }
    const double rate = (d1 - d0) / (static_cast<double>(t1 - t0) / 1e6);
    f[mode + "_jobs_per_s"] = rate;
    f[mode + "_enqueue_p50_ms"] = percentile(latencies_ms, 50);
    f[mode + "_enqueue_p99_ms"] = percentile(latencies_ms, 99);
    table.push_back({{"mode", mode}, {"outstanding", kOutstanding}, {"jobs_per_s", rate},
                     {"enqueue_p50_ms", f[mode + "_enqueue_p50_ms"]}, {"enqueue_p99_ms", f[mode + "_enqueue_p99_ms"]}});
  }
  return f;
}

// 100,000 ready jobs drained by 2 example workers x 32, timed from the
// moment the workers start (their start-up counts, as it does for a user):
// with the default, adaptive prefetch, with --prefetch 500 (the tuned
// setting of the other scenarios) and with --prefetch 32 (= concurrency, the
// default before it adapted).
Figures default_settings(const Options& o, Json&, const std::vector<std::string>& prefetches = {"", "500", "32"}) {
  const size_t n = o.smoke ? 20'000 : 100'000;
  Figures f;
  for (const std::string& prefetch : prefetches) {
    Cluster cluster;
    enqueue_all(cluster.endpoint(), noop_jobs(n, "bulk"), 2);
    progress(fmt::format("defaults: {} jobs, prefetch {}", n, prefetch.empty() ? "default" : prefetch));
    const int64_t t0 = wall_us();
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> argv = {bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "bulk", "--concurrency", "32"};
      if (!prefetch.empty()) argv.insert(argv.end(), {"--prefetch", prefetch});
      cluster.start_worker(argv);
    }
    await([&] { return done_count(cluster, "bulk") >= static_cast<int64_t>(n); }, 300s, 2ms);
    f[prefetch.empty() ? "default_jobs_per_s" : "prefetch_" + prefetch + "_jobs_per_s"] =
        n / (static_cast<double>(wall_us() - t0) / 1e6);
  }
  if (f.contains("prefetch_500_jobs_per_s"))
    f["ratio_default_to_prefetch_500"] = f["default_jobs_per_s"] / f["prefetch_500_jobs_per_s"];
  return f;
}

// 1,000 jobs/s, one job per enqueue_async call (stamped with its send
// time), run by one example worker at default settings: enqueue-to-start
// at the low rates most applications see (issue 14).
Figures low_rate(const Options& o, Json&) {
  const double seconds = o.smoke ? 2 : 10;
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "low", "--record", record.string()});
  cluster.wait_for_workers(1);
  progress(fmt::format("low rate: 1,000 single-job enqueues/s for {} s", seconds));
  Client client(cluster.endpoint(), with_timeouts({}));
  std::vector<std::future<std::expected<EnqueueResult, ClientError>>> pending;
  const int64_t start = wall_us(), end = start + static_cast<int64_t>(seconds * 1e6);
  for (int64_t next = start; next < end; next += 1000) {
    if (const int64_t wait = next - wall_us(); wait > 0) std::this_thread::sleep_for(std::chrono::microseconds(wait));
    pending.push_back(client.enqueue_async({"low", "noop", std::to_string(wall_us()), "", 0, 0}));
  }
  size_t accepted = 0;
  for (auto& p : pending)
    if (auto r = p.get(); r && r->status == EnqueueResult::Status::accepted) ++accepted;
  await([&] { return done_count(cluster, "low") >= static_cast<int64_t>(accepted); }, 60s);
  std::vector<double> ms;
  for (const auto& r : read_records(record))
    if (r.payload != "-") ms.push_back(static_cast<double>(r.start_us - std::stoll(r.payload)) / 1000.0);
  Figures f;
  f["jobs"] = static_cast<double>(ms.size());
  f["p50_ms"] = percentile(ms, 50);
  f["p99_ms"] = percentile(ms, 99);
  f["max_ms"] = percentile(ms, 100);
  return f;
}

// BullMQ (bench/peers, installed by make bench-peers) on a Redis started
// like every scenario's; its figures are the last stdout line of
// bullmq_bench.js, as JSON.
Figures bullmq(const Options& o, const std::string& scenario) {
  RedisServer redis;
  const std::string cmd = fmt::format("node {}/bullmq_bench.js --port {} --scenario {} --seconds {} --jobs {}{} 2>&1",
                                      o.peers_dir, redis.port(), scenario, o.smoke ? 2 : 10, o.smoke ? 20'000 : 100'000,
                                      o.smoke ? " --sweep 1x32,1x100" : "");
  std::string output = command_output(cmd);
  while (!output.empty() && output.back() == '\n') output.pop_back();
  const auto line_start = output.find_last_of('\n');
  const Json figures = Json::parse(output.substr(line_start == std::string::npos ? 0 : line_start + 1), nullptr, false);
  Figures f;
  if (!figures.is_object()) {
    progress("BullMQ " + scenario + " failed: " + output.substr(0, 2000));
    return f;
  }
  for (const auto& [k, v] : figures.items()) f[k] = v.get<double>();
  return f;
}

// The single-job, low-rate and default-settings scenarios of dueq and of
// BullMQ in the same run, and their ratios, dueq / BullMQ (issue 14): above
// 1 is better for dueq in throughput, below 1 in latency. BullMQ's figures
// are those of the best worker layout of a sweep (bullmq_bench.js).
//
// dueq's single-job figure is its callbacks mode, the model of the BullMQ
// harness (each answer sends the next request on the thread that read it);
// the futures mode, where a second thread waits on each answer, is reported
// beside it.
Figures peers(const Options& o, Json& table) {
  const Figures dueq_single = single_job(o, table, {"callbacks", "async"});
  const Figures dueq_low = low_rate(o, table);
  const Figures dueq_bulk = default_settings(o, table, {""});
  progress("peers: BullMQ single");
  const Figures bull_single = bullmq(o, "single");
  progress("peers: BullMQ low_rate");
  const Figures bull_low = bullmq(o, "low_rate");
  progress("peers: BullMQ defaults");
  const Figures bull_bulk = bullmq(o, "defaults");
  if (bull_single.empty() || bull_low.empty() || bull_bulk.empty()) return {};
  Figures f;
  f["dueq_single_jobs_per_s"] = dueq_single.at("callbacks_jobs_per_s");
  f["dueq_single_futures_jobs_per_s"] = dueq_single.at("async_jobs_per_s");
  f["bullmq_single_jobs_per_s"] = bull_single.at("jobs_per_s");
  f["ratio_single"] = f["dueq_single_jobs_per_s"] / f["bullmq_single_jobs_per_s"];
  f["dueq_low_rate_p50_ms"] = dueq_low.at("p50_ms");
  f["dueq_low_rate_p99_ms"] = dueq_low.at("p99_ms");
  f["bullmq_low_rate_p50_ms"] = bull_low.at("p50_ms");
  f["bullmq_low_rate_p99_ms"] = bull_low.at("p99_ms");
  f["ratio_low_rate_p50"] = f["dueq_low_rate_p50_ms"] / f["bullmq_low_rate_p50_ms"];
  f["ratio_low_rate_p99"] = f["dueq_low_rate_p99_ms"] / f["bullmq_low_rate_p99_ms"];
  f["dueq_defaults_jobs_per_s"] = dueq_bulk.at("default_jobs_per_s");
  f["bullmq_defaults_jobs_per_s"] = bull_bulk.at("jobs_per_s");
  f["ratio_defaults"] = f["dueq_defaults_jobs_per_s"] / f["bullmq_defaults_jobs_per_s"];
  // BullMQ's figures are those of its best worker layout (fastest, or
  // lowest p99 at the low rate); every layout swept is kept beside them.
  for (const auto& [prefix, figures] : {std::pair{"bullmq_single_", &bull_single}, std::pair{"bullmq_low_rate_", &bull_low},
                                        std::pair{"bullmq_defaults_", &bull_bulk}})
    for (const auto& [k, v] : *figures)
      if (k.starts_with("sweep_") || k.starts_with("best_")) f[prefix + k] = v;
  return f;
}

// Key files for a CURVE run: the broker's pair and one client pair per role
// (producer, worker, admin for the stats probes), on an allow-list that
// grants every queue.
class CurveKeys {
 public:
  CurveKeys() : dir_(make_temp_dir("bench-keys")) {
    std::ofstream allow(dir_ / "allow.toml");
    for (const char* name : {"broker", "producer", "worker", "admin"}) {
      auto pair = generate_curve_key_pair();
      if (!pair || !write_curve_key_files((dir_ / name).string(), *pair)) throw std::runtime_error("cannot write CURVE keys");
      if (std::string_view(name) != "broker")
        allow << "[[key]]\nname = \"" << name << "\"\npublic = \"" << pair->public_key << "\"\nrole = \"" << name
              << "\"\n" << (std::string_view(name) == "admin" ? "" : "queues = [\"*\"]\n");
    }
  }
  ~CurveKeys() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Link link() const {
    const std::string broker_pub = (dir_ / "broker.pub").string();
    auto client = [&](const char* name) { return ClientOptions{.broker_key = broker_pub, .key_file = key(name)}; };
    return Link{{"--curve-key", key("broker"), "--allow-list", (dir_ / "allow.toml").string()},
                client("producer"),
                client("admin"),
                {"--broker-key", broker_pub, "--key", key("worker")}};
  }

 private:
  std::string key(const char* name) const { return (dir_ / (std::string(name) + ".key")).string(); }
  std::filesystem::path dir_;
};

// The price of CurveZMQ: bulk and steady throughput (2 workers x 32) and
// enqueue-to-start latency at half the plaintext steady rate (1 worker x 64),
// each over plaintext and over CURVE in the same run.
Figures curve(const Options& o, Json& table) {
  const CurveKeys keys;
  Figures f;
  for (const bool encrypted : {false, true}) {
    const Link link = encrypted ? keys.link() : Link{};
    const std::string mode = encrypted ? "curve" : "plain";
    progress("curve: " + mode);
    Figures run = bulk_and_steady(o, 2, 32, link);
    f[mode + "_bulk_process_jobs_per_s"] = run["bulk_process_jobs_per_s"];
    f[mode + "_bulk_enqueue_jobs_per_s"] = run["bulk_enqueue_jobs_per_s"];
    f[mode + "_steady_jobs_per_s"] = run["steady_jobs_per_s"];
  }
  const double rate = f["plain_steady_jobs_per_s"] / 2;
  for (const bool encrypted : {false, true}) {
    const std::string mode = encrypted ? "curve" : "plain";
    Figures run = latency_run(o, rate, 1, 64, encrypted ? keys.link() : Link{});
    f[mode + "_half_load_p50_ms"] = run["p50_ms"];
    f[mode + "_half_load_p99_ms"] = run["p99_ms"];
    table.push_back({{"mode", mode}, {"rate_jobs_per_s", rate}, {"bulk_process_jobs_per_s", f[mode + "_bulk_process_jobs_per_s"]},
                     {"steady_jobs_per_s", f[mode + "_steady_jobs_per_s"]}, {"p50_ms", run["p50_ms"]}, {"p99_ms", run["p99_ms"]}});
  }
  f["half_load_rate_jobs_per_s"] = rate;
  f["ratio_bulk_process"] = f["curve_bulk_process_jobs_per_s"] / f["plain_bulk_process_jobs_per_s"];
  f["ratio_bulk_enqueue"] = f["curve_bulk_enqueue_jobs_per_s"] / f["plain_bulk_enqueue_jobs_per_s"];
  f["ratio_steady"] = f["curve_steady_jobs_per_s"] / f["plain_steady_jobs_per_s"];
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string scenario = "all", out = "bench/results/results.jsonl";
  bool json = false;
  CLI::App app{"dueq-bench: measure dueq against the targets in DESIGN.md"};
  app.add_option("--scenario", scenario, "throughput, latency, lateness, recovery, duplicate_window, memory, backlog, audit, curve, single, defaults, low_rate, all, or peers (BullMQ beside dueq; not part of all: make bench-peers)")
      ->check(CLI::IsMember({"all", "throughput", "latency", "lateness", "recovery", "duplicate_window", "memory", "backlog", "audit", "curve", "single", "defaults", "low_rate", "peers"}));
  app.add_option("--peers-dir", o.peers_dir, "where bullmq_bench.js and its node_modules are (peers scenario)");
  app.add_option("--latency-rate", o.latency_rate, "jobs/s for the latency scenario (default: half the steady maximum measured in the same invocation, else 20,000)")
      ->check(CLI::Range(100.0, 1'000'000.0));
  app.add_option("--single-modes", o.single_modes, "the single scenario's producers: clients, threads, async (futures) and/or callbacks")
      ->check(CLI::IsMember({"clients", "threads", "async", "callbacks"}));
  app.add_option("--runs", o.runs, "runs per scenario (median reported)")->check(CLI::Range(1, 20));
  app.add_flag("--smoke", o.smoke, "small sizes and one run: checks that the driver works");
  app.add_flag("--json", json, "print the JSON records on stdout");
  app.add_option("--out", out, "append JSON records to this file ('' = none)");
  app.add_option("--lateness-data", o.plot_data, "write the lateness samples (ms, cumulative fraction) of the last run here");
  CLI11_PARSE(app, argc, argv);
  if (o.smoke) o.runs = 1;

  utsname host{};
  uname(&host);
  const Json machine{{"cores", std::thread::hardware_concurrency()},
                     {"cpu", command_output("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'")},
                     {"kernel", host.release}};
  // The commit and build type compiled into this binary: the bench may be
  // started from any directory, or from a tree that has moved on since.
  const Json versions{{"dueq", build_commit()},
                      {"build_type", build_type()},
                      {"redis", command_output("redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-")}};

  double max_steady = 0;
  const std::vector<std::string> order = {"throughput", "lateness", "latency", "recovery", "duplicate_window", "memory", "backlog", "audit", "curve", "single", "defaults", "low_rate", "peers"};
  int failures = 0;
  for (const auto& name : order) {
    if (scenario != name && (scenario != "all" || name == "peers")) continue;
    fmt::print(stderr, "== {} ({} run{})\n", name, o.runs, o.runs > 1 ? "s" : "");
    std::map<std::string, std::vector<double>> samples;
    Json table = Json::array();
    const int64_t scenario_start = wall_ms();
    for (int run = 0; run < o.runs; ++run) try {
      Figures f;
      if (name == "throughput") f = throughput(o, table);
      else if (name == "lateness") f = lateness(o, table);
      else if (name == "latency") f = latency(o, table, o.latency_rate > 0 ? o.latency_rate : max_steady > 0 ? max_steady / 2 : (o.smoke ? 2'000 : 20'000));
      else if (name == "recovery") f = recovery(o, table);
      else if (name == "duplicate_window") f = duplicate_window(o, table);
      else if (name == "memory") f = memory(o, table);
      else if (name == "backlog") f = backlog(o, table);
      else if (name == "curve") f = curve(o, table);
      else if (name == "single") f = single_job(o, table, o.single_modes);
      else if (name == "defaults") f = default_settings(o, table);
      else if (name == "low_rate") f = low_rate(o, table);
      else if (name == "peers") f = peers(o, table);
      else f = audit_under_load(o, table);
      for (const auto& [k, v] : f) samples[k].push_back(v);
    } catch (const std::exception& e) {
      fmt::print(stderr, "{} failed: {}\n", name, e.what());
      samples.clear();
      break;
    }
    if (samples.empty()) {
      ++failures;
      continue;
    }
    Json figures, spread;
    for (const auto& [k, v] : samples) {
      figures[k] = median(v);
      spread[k] = {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
    }
    if (name == "throughput") max_steady = figures["steady_jobs_per_s"].get<double>();
    Json record{{"scenario", name}, {"parameters", {{"runs", o.runs}, {"smoke", o.smoke}}}, {"figures", figures},
                {"spread", spread}, {"versions", versions}, {"machine", machine}, {"time_ms", wall_ms()}};
    if (!table.empty()) record["table"] = table;
    std::string line = fmt::format("{} ({:.0f} s):", name, (wall_ms() - scenario_start) / 1000.0);
    for (const auto& [k, v] : figures.items()) line += fmt::format(" {}={:.4g}", k, v.get<double>());
    fmt::print("{}\n", line);
    if (json) fmt::print("{}\n", record.dump());
    if (!out.empty()) {
      std::ofstream file(out, std::ios::app);
      if (!file) {
        fmt::print(stderr, "cannot append to {}\n", out);
        ++failures;
      }
      file << record.dump() << "\n";
    }
  }
  return failures == 0 ? 0 : 1;
}
