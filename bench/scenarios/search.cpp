#include "bench/scenarios.hpp"

#include <atomic>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace dueq::bench {

using namespace dueq::testing;

namespace {

// One whole search (every page, following `next`); the jobs it found, or -1
// when a page failed.
int64_t search_all(const std::string& endpoint, const std::string& args) {
  int64_t found = 0;
  std::string after;
  do {
    const auto run = run_dueq(endpoint, "--timeout 60s search " + args + " --limit 1000 --json" +
                                            (after.empty() ? "" : " --after " + after), false);
    const auto page = nlohmann::json::parse(run.out, nullptr, false);
    if (run.code != 0 || !page.is_object()) return -1;
    found += static_cast<int64_t>(page["rows"].size());
    after = page["next"].get<std::string>();
  } while (!after.empty());
  return found;
}

// The same through one kept connection, as the dashboard's server or a
// script using the client library searches: no process started per page.
int64_t search_all(Client& client, const std::string& type) {
  int64_t found = 0;
  std::string after;
  do {
    auto page = client.admin({.op = "search", .queue = "store", .limit = 1000, .args = {{"type", type}, {"after", after}}});
    if (!page) return -1;
    found += static_cast<int64_t>(page->rows.size());
    after = page->next;
  } while (!after.empty());
  return found;
}

}  // namespace

// `dueq search` of one queue holding 1,000,000 scheduled jobs (100 of them
// of the type searched for, enqueued in batches by two producers, at a rate
// reported too): how long a whole search takes, by type and by
// id prefix (each page a `dueq search` run); then the enqueue-to-start p99
// of 20,000 jobs/s through another queue during a storm of searches by type
// (one after another, without pause, through one kept connection), beside
// the same flow without them, in ten alternating 1 s blocks each way; last,
// one whole search by id prefix beside that flow.
Figures search_under_load(const Options& o, Json&) {
  const size_t n = o.smoke ? 1'000 : 1'000'000;
  const size_t needles = 100;
  const double rate = o.smoke ? 2'000 : 20'000;
  const double phase_s = o.smoke ? 1 : 10;
  const int64_t warm_up_us = o.smoke ? 1'000'000 : 5'000'000;
  Cluster cluster;
  restart_broker_without_reconciler(cluster);
  Figures f = redis_baselines(cluster.redis());
  const auto record = cluster.dir() / "starts.txt";
  start_workers(cluster, "flow", 1, 64, record.string());
  cluster.wait_for_workers(1);
  progress(fmt::format("search: scheduling {} jobs in one queue", n));
  std::vector<JobSpec> jobs;
  jobs.reserve(n);
  const int64_t later = wall_ms() + 86'400'000;
  for (size_t i = 0; i < n; ++i)
    jobs.push_back({"store", i % (n / needles) == 0 ? "needle" : "noop", std::string(100, 'x'), fmt::format("job-{}", i), later, 0});
  const int64_t scheduling = wall_us();
  enqueue_all(cluster.endpoint(), jobs, 2);
  // What the type index costs the enqueue of delayed jobs (compare builds).
  f["scheduled_jobs_per_s"] = static_cast<double>(n) * 1e6 / static_cast<double>(wall_us() - scheduling);
  jobs.clear();

  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 3});
  size_t sent = paced_flow(client, "flow", rate, [end = wall_us() + warm_up_us] { return wall_us() >= end; });
  stop_aof_rewrites(cluster.redis());

  progress("search: whole searches by type and by id prefix, nothing flowing");
  int64_t t0 = wall_us();
  f["found_by_type"] = static_cast<double>(search_all(cluster.endpoint(), "store --type needle"));
  f["search_by_type_s"] = static_cast<double>(wall_us() - t0) / 1e6;
  t0 = wall_us();
  f["found_by_prefix"] = static_cast<double>(search_all(cluster.endpoint(), "store --id-prefix job-77777"));
  f["search_by_prefix_s"] = static_cast<double>(wall_us() - t0) / 1e6;

  // The flow without and beside the storm in alternate blocks, a settling
  // gap between them measured in neither: a machine's drift over the run
  // (another process, a warming cache) falls on both alike.
  progress(fmt::format("search: {:.0f} jobs/s, {} s without searches and {} s beside a storm, alternating", rate,
                       phase_s, phase_s));
  const int blocks = o.smoke ? 1 : 10;
  const auto block_us = static_cast<int64_t>(phase_s * 1e6) / blocks;
  const int64_t settle_us = o.smoke ? 0 : 200'000;
  std::atomic<int64_t> searches{0}, failed{0};
  std::vector<double> quiet, during;
  auto flow_for = [&](int64_t us) {
    const int64_t end = wall_us() + us;
    sent += paced_flow(client, "flow", rate, [end] { return wall_us() >= end; });
  };
  std::vector<std::pair<Window, bool>> windows;  // and whether searches ran
  for (int b = 0; b < blocks; ++b) {
    const int64_t quiet_start = wall_us();
    flow_for(block_us);
    windows.push_back({{quiet_start, wall_us()}, false});
    flow_for(settle_us);
    std::atomic<bool> stop{false};
    const int64_t storm_start = wall_us();
    std::thread storm([&] {
      Client searcher(cluster.endpoint(), ClientOptions{.timeout_ms = 60'000, .attempts = 1});
      while (!stop.load()) {
        if (search_all(searcher, "needle") != static_cast<int64_t>(needles)) ++failed;
        else ++searches;
      }
    });
    flow_for(block_us);
    stop = true;
    storm.join();
    windows.push_back({{storm_start, wall_us()}, true});
    flow_for(settle_us);
  }
  // What yielding to the flow costs an operator: the same search by id
  // prefix with the flow going on.
  progress("search: a whole search by id prefix beside the flow");
  std::atomic<int64_t> prefix_done_us{0}, prefix_found{0};
  t0 = wall_us();
  std::thread prefix([&] {
    prefix_found = search_all(cluster.endpoint(), "store --id-prefix job-77777");
    prefix_done_us = wall_us();
  });
  sent += paced_flow(client, "flow", rate, [&] { return prefix_done_us.load() != 0; });
  prefix.join();
  f["found_by_prefix_beside_flow"] = static_cast<double>(prefix_found.load());
  f["search_by_prefix_beside_flow_s"] = static_cast<double>(prefix_done_us.load() - t0) / 1e6;
  await([&] { return done_count(cluster, "flow") >= static_cast<int64_t>(sent); }, 60s);

  std::vector<double> block_p99_quiet, block_p99_during;  // each block's own p99
  for (const auto& [window, storming] : windows) {
    auto latencies = flow_latencies(record, window);
    (storming ? block_p99_during : block_p99_quiet).push_back(percentile(latencies, 99));
    auto& into = storming ? during : quiet;
    into.insert(into.end(), latencies.begin(), latencies.end());
  }
  f["p50_ms_without_searches"] = percentile(quiet, 50);
  f["p50_ms_during_searches"] = percentile(during, 50);
  f["p90_ms_without_searches"] = percentile(quiet, 90);
  f["p90_ms_during_searches"] = percentile(during, 90);
  f["p99_ms_without_searches"] = percentile(quiet, 99);
  f["p99_ms_during_searches"] = percentile(during, 99);
  f["ratio_p99"] = f["p99_ms_during_searches"] / f["p99_ms_without_searches"];
  // A burst of the machine's own noise lands in one block: the median of
  // the blocks' p99s each way leaves it out.
  f["ratio_p99_block_median"] = percentile(block_p99_during, 50) / percentile(block_p99_quiet, 50);
  f["searches_during"] = static_cast<double>(searches.load());
  f["searches_failed"] = static_cast<double>(failed.load());
  f["worker_lapses"] = static_cast<double>(cluster.log_count("stopped heartbeating"));
  return f;
}

}  // namespace dueq::bench
