#include "bench/scenarios.hpp"

#include <fstream>
#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

// Idempotency at the top steady rate. A job finishes; then its queue runs
// flat out for 15 s (the client's resend span) with done_max far below what
// finishes meanwhile, and a resend of that job, as after a lost reply, must
// be answered duplicate (the scenario fails otherwise). The done set's
// measured size per id gives what the 30 s default window costs at this rate.
Figures duplicate_window(const Options& o, Json&) {
  const int64_t flow_ms = o.smoke ? 1'500 : 15'000;
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

}  // namespace dueq::bench
