#include "bench/scenarios.hpp"

#include <httplib.h>

#include <atomic>
#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

namespace {

constexpr int kIdleQueues = 100;  // each costs a stats call per metrics read

// Steady throughput and broker CPU per job on a fresh cluster, with or
// without the HTTP server and a scraper asking for /metrics every second.
Figures steady_arm(const Options& o, bool scraped) {
  const double seconds = o.smoke ? 1 : 10;
  const int http = free_port();
  Cluster cluster(scraped ? std::vector<std::string>{"--http", fmt::format("127.0.0.1:{}", http)} : std::vector<std::string>{});
  {
    Client client(cluster.endpoint(), with_timeouts({}));
    const int64_t later = wall_us() / 1000 + 3'600'000;
    for (int q = 0; q < kIdleQueues; ++q) (void)client.enqueue_batch(noop_jobs(1, fmt::format("idle{}", q), later));
  }
  start_workers(cluster, "steady", 2, 32);
  cluster.wait_for_workers(2);
  std::atomic<bool> scraping{scraped};
  std::atomic<int64_t> scrapes{0}, scrape_us{0}, scrape_bytes{0};
  std::thread scraper([&] {
    httplib::Client client("127.0.0.1", http);
    while (scraping) {
      const int64_t t0 = wall_us();
      if (auto res = client.Get("/metrics"); res && res->status == 200) {
        scrape_us += wall_us() - t0;
        scrape_bytes = static_cast<int64_t>(res->body.size());
        ++scrapes;
      }
      std::this_thread::sleep_for(1s);
    }
  });
  Figures f;
  // Idle first: what the broker and Redis spend per second with no jobs
  // flowing is the metrics' own cost (with the scraper) or none of it.
  const int64_t idle0 = cpu_us(cluster.broker().pid()) + cpu_us(cluster.redis().pid()), t0 = wall_us();
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  f["idle_cpu_ms_per_s"] = static_cast<double>(cpu_us(cluster.broker().pid()) + cpu_us(cluster.redis().pid()) - idle0) /
                           (static_cast<double>(wall_us() - t0) / 1e3);
  const int64_t broker0 = cpu_us(cluster.broker().pid()), d0 = done_count(cluster, "steady");
  f["steady_jobs_per_s"] = steady(cluster, "steady", seconds);
  const int64_t broker1 = cpu_us(cluster.broker().pid()), d1 = done_count(cluster, "steady");
  scraping = false;
  scraper.join();
  f["cpu_us_per_job_broker"] = static_cast<double>(broker1 - broker0) / static_cast<double>(std::max<int64_t>(1, d1 - d0));
  if (scraped) {
    if (scrapes == 0) throw std::runtime_error("no scrape of /metrics succeeded");
    f["scrape_ms"] = static_cast<double>(scrape_us) / static_cast<double>(scrapes) / 1e3;
    f["scrape_bytes"] = static_cast<double>(scrape_bytes);
  }
  return f;
}

}  // namespace

// The cost of metrics: steady flow with the HTTP server on and /metrics
// scraped every second, against the same flow without it, on fresh
// clusters taken in turn (without, with, without, with, ...), each with
// 100 idle queues besides the busy one; the ratio is the median of the
// pairs' ratios. Steady throughput here varies by more than the cost
// between runs, so each arm first sits idle: the CPU the broker and Redis
// use per second then, scraped against not, is the metrics' own cost.
Figures metrics_cost(const Options& o, Json& table) {
  const int pairs = o.smoke ? 1 : 5;
  std::vector<double> without, with, ratios, cpu_without, cpu_with, scrape_ms, idle_extra;
  Figures last;
  for (int i = 0; i < pairs; ++i) {
    progress(fmt::format("metrics: pair {} of {}, without /metrics", i + 1, pairs));
    const Figures a = steady_arm(o, false);
    progress(fmt::format("metrics: pair {} of {}, scraped every second", i + 1, pairs));
    const Figures b = steady_arm(o, true);
    without.push_back(a.at("steady_jobs_per_s"));
    with.push_back(b.at("steady_jobs_per_s"));
    ratios.push_back(with.back() / without.back());
    idle_extra.push_back(b.at("idle_cpu_ms_per_s") - a.at("idle_cpu_ms_per_s"));
    cpu_without.push_back(a.at("cpu_us_per_job_broker"));
    cpu_with.push_back(b.at("cpu_us_per_job_broker"));
    scrape_ms.push_back(b.at("scrape_ms"));
    last = b;
    table.push_back({{"pair", i + 1}, {"without_jobs_per_s", without.back()}, {"scraped_jobs_per_s", with.back()},
                     {"cpu_us_per_job_broker_without", cpu_without.back()}, {"cpu_us_per_job_broker_scraped", cpu_with.back()},
                     {"idle_cpu_ms_per_s_without", a.at("idle_cpu_ms_per_s")}, {"idle_cpu_ms_per_s_scraped", b.at("idle_cpu_ms_per_s")}});
  }
  Figures f;
  f["steady_jobs_per_s_without"] = median(without);
  f["steady_jobs_per_s_scraped"] = median(with);
  // Each pair's arms ran minutes apart at most: their ratio leaves out
  // what drifts between pairs.
  f["scraped_over_without"] = median(ratios);
  f["cpu_us_per_job_broker_without"] = median(cpu_without);
  f["cpu_us_per_job_broker_scraped"] = median(cpu_with);
  f["scrape_ms"] = median(scrape_ms);
  // The metrics' CPU (broker and Redis, ms per s) as a share of the
  // machine's: on a CPU-bound host, at most the throughput they can take.
  f["metrics_cpu_ms_per_s"] = median(idle_extra);
  f["metrics_share_of_machine"] = f["metrics_cpu_ms_per_s"] / (1000.0 * std::thread::hardware_concurrency());
  f["scrape_bytes"] = last["scrape_bytes"];
  return f;
}

}  // namespace dueq::bench
