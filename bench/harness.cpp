#include "bench/harness.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "broker/store/redis_connection.hpp"
#include "common/clock.hpp"

namespace dueq::bench {

using namespace dueq::testing;

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

int64_t info_field(RedisServer& redis, const std::string& section, const std::string& field) {
  const std::string info = redis.cli("INFO " + section);
  const auto pos = info.find("\n" + field + ":");
  return pos == std::string::npos ? 0 : std::stoll(info.substr(pos + field.size() + 2));
}

int64_t used_memory(RedisServer& redis) { return info_field(redis, "memory", "used_memory"); }

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

double enqueue_all(const std::string& endpoint, const std::vector<JobSpec>& jobs, int producers, const Link& link) {
  std::atomic<size_t> next{0};
  const int64_t t0 = wall_us();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(producers));
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
  return static_cast<double>(jobs.size()) / (static_cast<double>(wall_us() - t0) / 1e6);
}

std::vector<JobSpec> noop_jobs(size_t n, const std::string& queue, int64_t due_ms, size_t payload) {
  std::vector<JobSpec> jobs;
  jobs.reserve(n);
  for (size_t i = 0; i < n; ++i) jobs.push_back({queue, "noop", std::string(payload, 'x'), "", due_ms, 0});
  return jobs;
}

int64_t done_count(Cluster& cluster, const std::string& queue) {
  auto s = cluster.stats(queue);
  return s ? s->done : -1;
}

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

double steady(Cluster& cluster, const std::string& queue, double seconds, const Link& link) {
  constexpr int producers = 2;
  constexpr int64_t window = 20'000;
  std::atomic<bool> running{true};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(producers));
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
  return static_cast<double>(d1 - d0) / (static_cast<double>(t1 - t0) / 1e6);
}

void start_workers(Cluster& cluster, const std::string& queue, int count, int concurrency, const std::string& record,
                   const Link& link) {
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

size_t paced_flow(Client& client, const std::string& queue, double rate, const std::function<bool()>& until) {
  const int per_ms = std::max(1, static_cast<int>(rate / 1000));
  int64_t next = wall_us();
  size_t sent = 0;
  while (!until()) {
    std::vector<JobSpec> batch;
    batch.reserve(static_cast<size_t>(per_ms));
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

void restart_broker_without_reconciler(Cluster& cluster) {
  const auto config = cluster.dir() / "broker.toml";
  std::ofstream(config) << "reconcile_interval = 0\n";
  cluster.broker().signal(SIGTERM);
  cluster.broker().wait();
  cluster.start_broker({"--config", config.string()});
}

void stop_aof_rewrites(RedisServer& redis) {
  await([&] {
    return info_field(redis, "persistence", "aof_rewrite_in_progress") == 0 &&
           info_field(redis, "persistence", "aof_rewrite_scheduled") == 0;
  }, std::chrono::seconds(300));
  redis.cli("CONFIG SET auto-aof-rewrite-percentage 0");
}

std::vector<double> flow_latencies(const std::filesystem::path& record, Window window) {
  std::vector<double> out;
  for (const auto& r : read_records(record)) {
    if (r.payload == "-") continue;
    const int64_t stamp = std::stoll(r.payload);
    if (stamp >= window.start_us && stamp < window.end_us) out.push_back(static_cast<double>(r.start_us - stamp) / 1000.0);
  }
  return out;
}

}  // namespace dueq::bench
