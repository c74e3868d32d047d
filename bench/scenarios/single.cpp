#include "bench/scenarios.hpp"

#include <atomic>
#include <deque>
#include <stdexcept>
#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

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
  const double seconds = o.smoke ? 1 : 10;
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
    // A rate of zero would be a figure of a broken run (no worker started),
    // not of dueq.
    if (d1 <= d0)
      throw std::runtime_error(fmt::format("single ({}): no job finished in {} s of measuring", mode, seconds));
    const double rate = static_cast<double>(d1 - d0) / (static_cast<double>(t1 - t0) / 1e6);
    f[mode + "_jobs_per_s"] = rate;
    f[mode + "_enqueue_p50_ms"] = percentile(latencies_ms, 50);
    f[mode + "_enqueue_p99_ms"] = percentile(latencies_ms, 99);
    table.push_back({{"mode", mode}, {"outstanding", kOutstanding}, {"jobs_per_s", rate},
                     {"enqueue_p50_ms", f[mode + "_enqueue_p50_ms"]}, {"enqueue_p99_ms", f[mode + "_enqueue_p99_ms"]}});
  }
  return f;
}

Figures single(const Options& o, Json& table) { return single_job(o, table, o.single_modes); }

}  // namespace dueq::bench
