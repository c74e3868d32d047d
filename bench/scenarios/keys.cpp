#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {

// How a run's jobs are keyed, and the queue's settings for them.
struct KeyedVariant {
  const char* name;
  const char* config;  // the queue's TOML lines
  size_t keys;         // distinct keys (0: no key)
};

// 100,000 ready jobs (1,000 in a smoke run) of queue "k" under `variant`,
// drained by 2 example workers x 32 with --prefetch 500 from the moment
// they start: jobs/s.
double drain(const Options& o, const KeyedVariant& variant) {
  const size_t n = o.smoke ? 1'000 : 100'000;
  const std::filesystem::path dir = make_temp_dir("bench-keys");
  const auto config = write_config(dir, std::string("[queues.k]\n") + variant.config + "\n");
  double rate = 0;
  {
    Cluster cluster({"--config", config.string()});
    std::vector<JobSpec> jobs = noop_jobs(n, "k");
    for (size_t i = 0; variant.keys > 0 && i < n; ++i) jobs[i].key = fmt::format("tenant-{}", i % variant.keys);
    enqueue_all(cluster.endpoint(), jobs, 2);
    progress(fmt::format("keys: {} jobs, {}", n, variant.name));
    const int64_t t0 = wall_us();
    start_workers(cluster, "k", 2, 32);
    await([&] { return done_count(cluster, "k") >= static_cast<int64_t>(n); }, 300s, 2ms);
    rate = static_cast<double>(n) / (static_cast<double>(wall_us() - t0) / 1e6);
  }
  std::filesystem::remove_all(dir);
  return rate;
}

}  // namespace

// The same drain without keys, with a key per job and no limit, with a key
// per job and a limit of one per key (100,000 keys each holding a turn
// once: the cost of the accounting), an ordered queue of 1,000 keys of
// 100 jobs each (the parking and releasing of turns), and a fair queue of
// 100,000 keys (the tags), in one run.
Figures keyed_throughput(const Options& o, Json&) {
  const size_t keys = o.smoke ? 1'000 : 100'000;
  const KeyedVariant variants[] = {
      {"no_keys", "", 0},
      {"keys_no_limit", "", keys},
      {"keys_limit_1", "key_concurrency = 1", keys},
      {"ordered_1000_keys", "ordered = true", o.smoke ? size_t{50} : size_t{1'000}},
      {"fair_keys", "fair = true", keys},
  };
  Figures f;
  for (const auto& v : variants) f[std::string(v.name) + "_jobs_per_s"] = drain(o, v);
  for (const auto& v : variants)
    if (std::string(v.name) != "no_keys")
      f[std::string("ratio_") + v.name] = f[std::string(v.name) + "_jobs_per_s"] / f["no_keys_jobs_per_s"];
  return f;
}

}  // namespace dueq::bench
