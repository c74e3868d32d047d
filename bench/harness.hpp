#pragma once
// What every bench scenario uses: its options, its figures, a cluster's
// producers and workers, waits that fail the scenario, CPU accounting.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <source_location>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"

namespace dueq::bench {

using Json = nlohmann::json;
using dueq::testing::Cluster;
using dueq::testing::RedisServer;
using namespace std::chrono_literals;

struct Options {
  bool smoke = false;
  int runs = 3;
  std::string plot_data;  // lateness samples of the last run go here
  double latency_rate = 0;  // jobs/s for the latency scenario; 0 = half the measured steady maximum
  std::string peers_dir = DUEQ_SOURCE_DIR "/bench/peers";  // bullmq_bench.js and its node_modules
  std::vector<std::string> single_modes = {"clients", "threads", "async", "callbacks"};  // the single scenario's producers
  double max_steady = 0;  // the throughput scenario's steady figure, once it ran (latency's default rate)
};

// Figures of one run, by name.
using Figures = std::map<std::string, double>;

// A scenario whose jobs do not all finish has no figures: waiting longer
// than the generous limit means jobs were lost or stuck, which fails the run.
template <typename F>
void await(F condition, std::chrono::milliseconds timeout, std::chrono::milliseconds every = 20ms,
           std::source_location where = std::source_location::current()) {
  if (!dueq::testing::eventually(condition, timeout, every))
    throw std::runtime_error(fmt::format("the wait at {}:{} ran past {} s", where.file_name(), where.line(), timeout.count() / 1000));
}

// How a scenario's broker listens and its clients and workers reach it:
// plaintext (all empty), or CurveZMQ keys (CurveKeys::link()).
struct Link {
  std::vector<std::string> broker_args;
  ClientOptions client;  // producers
  ClientOptions admin;   // stats probes
  std::vector<std::string> worker_args;
};

// A client that waits up to 30 s for an answer and tries 3 times.
ClientOptions with_timeouts(ClientOptions options);
double median(std::vector<double> v);
// A progress line on stderr.
void progress(const std::string& text);
// One integer field of INFO (0 when absent).
int64_t info_field(RedisServer& redis, const std::string& section, const std::string& field);
int64_t used_memory(RedisServer& redis);
// Baselines on the same machine: one Redis round trip, and pipelined INCRs.
Figures redis_baselines(RedisServer& redis);
// Enqueues `jobs` with `producers` threads in batches of 1,000; returns jobs/s.
double enqueue_all(const std::string& endpoint, const std::vector<JobSpec>& jobs, int producers, const Link& link = {});
std::vector<JobSpec> noop_jobs(size_t n, const std::string& queue, int64_t due_ms = 0, size_t payload = 0);
// The queue's done count, -1 when the stats cannot be read.
int64_t done_count(Cluster& cluster, const std::string& queue);
// CPU time (user + system) a process has used so far, in microseconds.
int64_t cpu_us(pid_t pid);

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

// Producers keep `queue` fed (at most 20,000 jobs waiting) for `seconds`
// while the workers drain it; returns completed jobs/s over the window.
double steady(Cluster& cluster, const std::string& queue, double seconds, const Link& link = {});
// Workers buffer up to 500 jobs beyond their concurrency: with no-op handlers
// the pipeline must be deep enough to cover a broker round trip.
void start_workers(Cluster& cluster, const std::string& queue, int count, int concurrency, const std::string& record = "",
                   const Link& link = {});
// Sends `rate` single-batch jobs per second (a batch each millisecond) to
// `queue`, stamped with their enqueue time, until `until` says stop; returns
// how many it sent.
size_t paced_flow(Client& client, const std::string& queue, double rate, const std::function<bool()>& until);
// Enqueue-to-start ms of paced_flow's jobs (their payload is their enqueue
// time) in `record`: of those sent in [start_us, end_us).
struct Window {
  int64_t start_us = 0, end_us = 0;
};
std::vector<double> flow_latencies(const std::filesystem::path& record, Window window);
// The cluster's broker started again without the reconciler, whose audits
// would share the admin budget with what a scenario measures.
void restart_broker_without_reconciler(Cluster& cluster);
// Waits out any AOF rewrite and turns automatic ones off: a fork of a large
// Redis (a stall of up to a few hundred ms, then a child competing for the
// cores) must not land in one measured phase and not in the other.
void stop_aof_rewrites(RedisServer& redis);

}  // namespace dueq::bench
