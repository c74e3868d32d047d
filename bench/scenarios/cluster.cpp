#include "bench/scenarios.hpp"

#include <atomic>
#include <thread>

#include "tests/support/redis_cluster.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {

constexpr int kQueues = 6;

std::string queue_name(int q) { return fmt::format("scale{}", q); }

int64_t done_in_all(Client& probe) {
  auto s = probe.stats();
  if (!s) return -1;
  int64_t done = 0;
  for (const auto& q : *s) done += q.done;
  return done;
}

}  // namespace

// Steady flow over 6 queues on a Redis Cluster of 1, 2 and 3 masters (no
// replicas), one broker, 2 workers x 32 serving every queue, 2 producers of
// 1,000-job batches keeping at most 20,000 jobs waiting. Per layout: jobs/s,
// and CPU microseconds per job of each process (Redis: all masters
// together and the busiest one), from which bench/README.md projects what
// more machines would carry.
Figures cluster_scale(const Options& o, Json& table) {
  const double seconds = o.smoke ? 1 : 10;
  Figures f;
  for (int masters = 1; masters <= 3; ++masters) {
    RedisCluster redis(masters, 0);
    Cluster cluster;
    cluster.broker().signal(SIGKILL);
    cluster.broker().wait();
    cluster.use_redis_url(redis.url());
    cluster.start_broker();
    for (int w = 0; w < 2; ++w) {
      std::vector<std::string> argv = {bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--concurrency", "32",
                                       "--prefetch", "500"};
      for (int q = 0; q < kQueues; ++q) argv.insert(argv.end(), {"--queue", queue_name(q)});
      cluster.start_worker(argv);
    }
    cluster.wait_for_workers(2);
    progress(fmt::format("cluster: {} master(s), steady for {} s", masters, seconds));

    std::atomic<bool> running{true};
    std::vector<std::thread> producers;
    producers.reserve(2);
    for (int p = 0; p < 2; ++p)
      producers.emplace_back([&, p] {
        Client client(cluster.endpoint(), with_timeouts({}));
        Client probe(cluster.endpoint(), with_timeouts({}));
        for (int batch = p; running; batch += 2) {
          auto s = probe.stats();
          int64_t backlog = 0;
          if (s)
            for (const auto& q : *s) backlog += q.waiting + q.in_flight;
          if (backlog > 20'000) {
            std::this_thread::sleep_for(1ms);
            continue;
          }
          (void)client.enqueue_batch(noop_jobs(1000, queue_name(batch % kQueues)));
        }
      });
    Client probe(cluster.endpoint(), with_timeouts({}));
    std::this_thread::sleep_for(1s);  // warm-up
    std::vector<pid_t> nodes;
    nodes.reserve(redis.size());
    for (size_t i = 0; i < redis.size(); ++i) nodes.push_back(redis.node(i).pid());
    auto node_cpu = [&] {
      std::vector<int64_t> us;
      us.reserve(nodes.size());
      for (pid_t pid : nodes) us.push_back(cpu_us(pid));
      return us;
    };
    auto workers_cpu = [&] { return cpu_us(cluster.worker(0).pid()) + cpu_us(cluster.worker(1).pid()); };
    const auto redis0 = node_cpu();
    const int64_t broker0 = cpu_us(cluster.broker().pid()), workers0 = workers_cpu(), client0 = cpu_us(::getpid());
    const int64_t d0 = done_in_all(probe), t0 = wall_us();
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
    const int64_t d1 = done_in_all(probe), t1 = wall_us();
    const auto redis1 = node_cpu();
    const int64_t broker1 = cpu_us(cluster.broker().pid()), workers1 = workers_cpu(), client1 = cpu_us(::getpid());
    running = false;
    for (auto& t : producers) t.join();

    const double jobs = static_cast<double>(std::max<int64_t>(d1 - d0, 1));
    int64_t redis_all = 0, redis_busiest = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      redis_all += redis1[i] - redis0[i];
      redis_busiest = std::max(redis_busiest, redis1[i] - redis0[i]);
    }
    const std::string prefix = fmt::format("masters_{}_", masters);
    f[prefix + "steady_jobs_per_s"] = jobs / (static_cast<double>(t1 - t0) / 1e6);
    f[prefix + "cpu_us_per_job_redis_all"] = static_cast<double>(redis_all) / jobs;
    f[prefix + "cpu_us_per_job_redis_busiest"] = static_cast<double>(redis_busiest) / jobs;
    f[prefix + "cpu_us_per_job_broker"] = static_cast<double>(broker1 - broker0) / jobs;
    f[prefix + "cpu_us_per_job_workers"] = static_cast<double>(workers1 - workers0) / jobs;
    f[prefix + "cpu_us_per_job_client"] = static_cast<double>(client1 - client0) / jobs;
    table.push_back({{"masters", masters},
                     {"steady_jobs_per_s", f[prefix + "steady_jobs_per_s"]},
                     {"cpu_us_per_job_redis_busiest", f[prefix + "cpu_us_per_job_redis_busiest"]},
                     {"cpu_us_per_job_broker", f[prefix + "cpu_us_per_job_broker"]}});
  }
  f["masters_3_over_1"] = f["masters_3_steady_jobs_per_s"] / f["masters_1_steady_jobs_per_s"];
  return f;
}

}  // namespace dueq::bench
