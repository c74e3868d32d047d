#include "bench/scenarios.hpp"

#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

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

}  // namespace dueq::bench
