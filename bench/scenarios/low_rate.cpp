#include "bench/scenarios.hpp"

#include <thread>

namespace dueq::bench {

using namespace dueq::testing;

// 1,000 jobs/s, one job per enqueue_async call (stamped with its send
// time), run by one example worker at default settings: enqueue-to-start
// at the low rates most applications see (issue 14).
Figures low_rate(const Options& o, Json&) {
  const double seconds = o.smoke ? 1 : 10;
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "low", "--record", record.string()});
  cluster.wait_for_workers(1);
  progress(fmt::format("low rate: 1,000 single-job enqueues/s for {} s", seconds));
  Client client(cluster.endpoint(), with_timeouts({}));
  std::vector<std::future<std::expected<EnqueueResult, ClientError>>> pending;
  const int64_t start = wall_us(), end = start + static_cast<int64_t>(seconds * 1e6);
  for (int64_t next = start; next < end; next += 1000) {
    if (const int64_t wait = next - wall_us(); wait > 0) std::this_thread::sleep_for(std::chrono::microseconds(wait));
    pending.push_back(client.enqueue_async({"low", "noop", std::to_string(wall_us()), "", 0, 0}));
  }
  size_t accepted = 0;
  for (auto& p : pending)
    if (auto r = p.get(); r && r->status == EnqueueResult::Status::accepted) ++accepted;
  await([&] { return done_count(cluster, "low") >= static_cast<int64_t>(accepted); }, 60s);
  std::vector<double> ms;
  for (const auto& r : read_records(record))
    if (r.payload != "-") ms.push_back(static_cast<double>(r.start_us - std::stoll(r.payload)) / 1000.0);
  Figures f;
  f["jobs"] = static_cast<double>(ms.size());
  f["p50_ms"] = percentile(ms, 50);
  f["p99_ms"] = percentile(ms, 99);
  f["max_ms"] = percentile(ms, 100);
  return f;
}

}  // namespace dueq::bench
