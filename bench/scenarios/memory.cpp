#include "bench/scenarios.hpp"

#include "broker/store/redis_connection.hpp"

#include <fstream>
#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

Figures memory(const Options& o, Json&) {
  const size_t n = o.smoke ? 1'000 : 1'000'000;
  const size_t finished = o.smoke ? 1'000 : 500'000;
  // Queue "finished" keeps every finished job's document, so that its
  // history hash can be weighed.
  const auto config = std::filesystem::temp_directory_path() / fmt::format("dueq-bench-memory-{}.toml", ::getpid());
  std::ofstream(config) << fmt::format("[queues.finished]\nhistory_retention = \"1h\"\nhistory_max = {}\n", finished);
  Cluster cluster({"--config", config.string()});
  std::filesystem::remove(config);
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
  f["bytes_per_job"] = static_cast<double>(m3 - m2) / static_cast<double>(n);
  f["baseline_zset_bytes_per_member"] = static_cast<double>(m1 - m0) / static_cast<double>(n);
  // A finished job leaves its id in the done set for done_retention (at most
  // done_max of them): what a sustained rate costs Redis.
  progress(fmt::format("memory: {} finished jobs kept as done ids", finished));
  enqueue_all(cluster.endpoint(), noop_jobs(finished, "finished", 0, 100), 2);
  start_workers(cluster, "finished", 2, 8);
  await([&] { return done_count(cluster, "finished") >= static_cast<int64_t>(finished); }, 300s);
  const std::string done_bytes = cluster.redis().cli("MEMORY USAGE 'dueq:{finished}:done' SAMPLES 0");
  f["bytes_per_done_job"] = std::stod(done_bytes.empty() ? "0" : done_bytes) / static_cast<double>(finished);
  // ... and while history keeps its document, the history hash's entry:
  // what it costs beyond its 100-byte payload.
  const std::string history_bytes = cluster.redis().cli("MEMORY USAGE 'dueq:{finished}:history' SAMPLES 0");
  const double kept = std::stod(cluster.redis().cli("HLEN 'dueq:{finished}:history'"));
  f["history_bytes_per_job_beyond_payload"] =
      kept > 0 ? std::stod(history_bytes.empty() ? "0" : history_bytes) / kept - 100.0 : 0.0;
  f["history_kept"] = kept;
  return f;
}

}  // namespace dueq::bench
