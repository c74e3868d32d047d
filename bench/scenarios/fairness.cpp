#include <thread>

#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {

// The keys that wait with a backlog the whole window, by weight: one with
// the million jobs, and two weighed 2 and 3 with `dueq key weight`.
struct Backlogged {
  const char* key;
  int weight;
  size_t jobs, smoke_jobs;
};
constexpr Backlogged kBacklogged[] = {{"heavy", 1, 1'000'000, 5'000}, {"w2", 2, 200'000, 2'000}, {"w3", 3, 300'000, 3'000}};
constexpr size_t kLightKeys = 1'000;
constexpr double kLightRate = 500;  // light jobs per second, over the light keys in turn

// Where the light jobs go: beside the backlog in a fair queue, beside it in
// the same queue not fair, or alone (the floor the backlog adds to).
enum class Setting { fair, not_fair, alone };

std::vector<JobSpec> backlog(const Options& o, Setting setting) {
  std::vector<JobSpec> jobs;
  if (setting == Setting::alone) return jobs;
  for (const auto& b : kBacklogged)
    for (size_t i = 0; i < (o.smoke ? b.smoke_jobs : b.jobs); ++i)
      jobs.push_back({.queue = "f", .type = "noop", .payload = "-", .id = fmt::format("{}-{}", b.key, i), .key = b.key});
  return jobs;
}

// Light jobs, one a tick in turn over the light keys, each stamped with its
// enqueue time; until `end_us`. Returns how many were sent.
size_t light_flow(Client& client, int64_t end_us) {
  const auto tick = std::chrono::microseconds(static_cast<int64_t>(1e6 / kLightRate));
  size_t sent = 0;
  for (auto next = std::chrono::steady_clock::now(); wall_us() < end_us; next += tick) {
    JobSpec job{.queue = "f", .type = "noop", .payload = std::to_string(wall_us()),
                .id = fmt::format("light-{}", sent), .key = fmt::format("light-{}", sent % kLightKeys)};
    (void)client.enqueue_batch({std::move(job)});
    ++sent;
    std::this_thread::sleep_until(next + tick);
  }
  return sent;
}

// Starts of the backlogged keys between `from_us` and `to_us`, each key's
// share of them over its share of the weights.
void shares(const std::vector<StartRecord>& starts, int64_t from_us, int64_t to_us, Figures& f) {
  std::map<std::string, double> n;
  double all = 0, weights = 0;
  for (const auto& b : kBacklogged) weights += b.weight;
  for (const auto& r : starts) {
    if (r.start_us < from_us || r.start_us >= to_us) continue;
    const std::string key = r.id.substr(0, r.id.find('-'));
    if (key == "light") continue;
    ++n[key];
    ++all;
  }
  for (const auto& b : kBacklogged)
    f[fmt::format("share_{}_over_weight", b.key)] = all == 0 ? 0 : (n[b.key] / all) / (b.weight / weights);
}

// One run: the backlog enqueued, the workers started, then light jobs for
// the window; their enqueue-to-start ms, and in a fair queue the shares.
Figures run(const Options& o, Setting setting) {
  const bool fair = setting != Setting::not_fair;
  const std::filesystem::path dir = make_temp_dir("bench-fair");
  const auto config = write_config(dir, fmt::format("[queues.f]\nfair = {}\n", fair));
  Figures f;
  {
    Cluster cluster({"--config", config.string()});
    for (const auto& b : kBacklogged)
      if (b.weight != 1) run_dueq(cluster.endpoint(), fmt::format("key weight f {} {}", b.key, b.weight));
    const auto jobs = backlog(o, setting);
    progress(fmt::format("fairness ({}): {} backlogged jobs", fair ? "fair" : "not fair", jobs.size()));
    enqueue_all(cluster.endpoint(), jobs, 2);
    const auto record = cluster.dir() / "starts.txt";
    for (int i = 0; i < 2; ++i)
      cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "f", "--concurrency",
                            "32", "--prefetch", "1", "--record", record.string()});
    if (!jobs.empty()) await([&] { return done_count(cluster, "f") >= 2'000; }, 60s, 2ms);
    cluster.wait_for_workers(2);
    Client client(cluster.endpoint());
    const int64_t from = wall_us();
    const size_t sent = light_flow(client, from + (o.smoke ? 1'000'000 : 5'000'000));
    const int64_t to = wall_us();
    await([&] { return done_count(cluster, "f") >= static_cast<int64_t>(jobs.size() + sent); }, 300s, 5ms);
    std::vector<double> ms;
    const auto starts = read_records(record);
    for (const auto& r : starts)
      if (r.payload != "-") ms.push_back(static_cast<double>(r.start_us - std::stoll(r.payload)) / 1000.0);
    f["light_jobs"] = static_cast<double>(ms.size());
    f["light_p50_ms"] = percentile(ms, 50);
    f["light_p99_ms"] = percentile(ms, 99);
    if (setting == Setting::fair) shares(starts, from, to, f);
  }
  std::filesystem::remove_all(dir);
  return f;
}

}  // namespace

// 1,000 light keys sending 500 jobs/s between them beside three keys with a
// backlog (1,000,000 jobs of weight 1, 200,000 of weight 2, 300,000 of
// weight 3), 2 example workers x 32 with a prefetch of 1 (a prefetched
// backlog would stand between a light job and its start in the worker): the
// light jobs' enqueue-to-start in a fair queue, in the same queue not fair
// (due order: behind the backlog) and alone (no backlog: the floor), and the
// backlogged keys' shares of the starts during the light flow over their
// weights' (1 = exact).
Figures fairness(const Options& o, Json& table) {
  Figures fair = run(o, Setting::fair);
  Figures plain = run(o, Setting::not_fair);
  Figures alone = run(o, Setting::alone);
  for (const auto& [name, g] : {std::pair<const char*, Figures*>{"fair", &fair}, {"not fair", &plain}, {"alone", &alone}})
    table.push_back({{"light jobs", name}, {"light_p50_ms", (*g)["light_p50_ms"]}, {"light_p99_ms", (*g)["light_p99_ms"]}});
  Figures f = fair;
  f["not_fair_light_p50_ms"] = plain["light_p50_ms"];
  f["not_fair_light_p99_ms"] = plain["light_p99_ms"];
  f["alone_light_p50_ms"] = alone["light_p50_ms"];
  f["alone_light_p99_ms"] = alone["light_p99_ms"];
  return f;
}

}  // namespace dueq::bench
