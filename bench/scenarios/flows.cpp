#include <atomic>
#include <sstream>
#include <thread>

#include "bench/scenarios.hpp"

namespace dueq::bench {

using namespace dueq::testing;

namespace {

// Each worker's starts by id (the first of each).
std::map<std::string, int64_t> first_starts_us(const std::filesystem::path& record) {
  std::map<std::string, int64_t> out;
  for (const auto& r : read_records(record)) out.emplace(r.id, r.start_us);
  return out;
}

// Enqueue throughput: 4 producers send `requests` requests of 10 jobs each,
// as flows (a root and 9 children) or as plain ENQUEUE batches of 10, jobs
// due in an hour so that nothing runs: jobs/s.
double enqueue_rate(Cluster& cluster, const std::string& queue, int requests, bool as_flows) {
  std::atomic<int> next{0};
  const int64_t due = wall_ms() + 3'600'000, begin = steady_us();
  std::vector<std::thread> producers;
  producers.reserve(4);
  for (int p = 0; p < 4; ++p)
    producers.emplace_back([&] {
      Client client(cluster.endpoint(), with_timeouts({}));
      for (int r = next++; r < requests; r = next++) {
        std::vector<JobSpec> jobs;
        jobs.reserve(10);
        for (int j = 0; j < 10; ++j)
          jobs.push_back({.queue = queue, .type = "noop", .id = fmt::format("{}-{}-{}", queue, r, j), .due_ms = due});
        if (!as_flows) {
          auto done = client.enqueue_batch(std::move(jobs));
          if (!done) throw std::runtime_error("flows: plain enqueue failed: " + done.error().message);
          continue;
        }
        FlowJob root{jobs[0]};
        for (size_t j = 1; j < jobs.size(); ++j) root.children.push_back(FlowJob{jobs[j], ChildFailure::ignore});
        auto done = client.enqueue_flow(queue, std::move(root));
        if (!done || done->status != GroupResult::Status::accepted)
          throw std::runtime_error("flows: a flow was not accepted: " + (done ? done->reason : done.error().message));
      }
    });
  for (auto& t : producers) t.join();
  return requests * 10.0 / (static_cast<double>(steady_us() - begin) / 1e6);
}

// Redis bytes per job of `n` jobs due in an hour, made by `put`.
double bytes_per_job(Cluster& cluster, size_t n, const std::function<void()>& put) {
  const int64_t before = used_memory(cluster.redis());
  put();
  return static_cast<double>(used_memory(cluster.redis()) - before) / static_cast<double>(n);
}

// What the groups of `queue` hold (lua/lib/group.lua: the groups hash, each
// member's entry, the held jobs' entries, the member sets), in bytes as
// MEMORY USAGE counts them, per one of `n` members.
double group_bytes_per_member(Cluster& cluster, const std::string& queue, size_t n) {
  std::istringstream keys(cluster.redis().cli(fmt::format("--scan --pattern 'dueq:{{{}}}:groups*'", queue)));
  int64_t bytes = 0;
  for (std::string key; std::getline(keys, key);)
    if (!key.empty()) bytes += std::stoll("0" + cluster.redis().cli(fmt::format("MEMORY USAGE '{}' SAMPLES 0", key)));
  return static_cast<double>(bytes) / static_cast<double>(n);
}

}  // namespace

// Flows and batches (docs/flows.md). Fan-in: a batch of 100,000 members
// (2,000 in a smoke run), added 1,000 a request and closed, with an
// on_complete callback, drained by 2 workers of 64 handlers: how long after
// the last member's start the callback starts (its ack, the release in the
// same step, a promote and a lease between). Then 300 flows (30) of a
// parent and 9 children due now, enqueued 50 ms apart: each parent's start
// after its last child's start. Enqueue: 2,000 requests (200) of 10 jobs as
// flows, then as plain ENQUEUE batches, in one cluster. Bytes: Redis memory
// per job of 20,000 jobs (2,000) as batch members, as flow children (flows
// of 100) and as plain jobs, all due in an hour, and what the groups' own
// keys take per member (MEMORY USAGE).
Figures flows(const Options& o, Json& table) {
  const size_t members = o.smoke ? 2'000 : 100'000;
  const int flows_n = o.smoke ? 30 : 300, requests = o.smoke ? 200 : 2'000;
  const size_t sized = o.smoke ? 2'000 : 20'000;
  Figures f;
  {
    Cluster cluster;
    const auto record = cluster.dir() / "starts.txt";
    Client client(cluster.endpoint(), with_timeouts({}));
    progress(fmt::format("flows: a batch of {} members with an on_complete callback", members));
    auto opened = client.open_batch("fan", "fan-in", BatchCallbacks{.on_complete = JobSpec{.queue = "fan", .type = "noop", .id = "callback"}});
    if (!opened || opened->status != GroupResult::Status::accepted) throw std::runtime_error("flows: the batch did not open");
    for (size_t at = 0; at < members; at += 1'000) {
      std::vector<JobSpec> jobs;
      for (size_t i = at; i < std::min(members, at + 1'000); ++i) jobs.push_back({.queue = "fan", .type = "noop", .id = fmt::format("m{}", i)});
      auto added = client.add_to_batch("fan", "fan-in", std::move(jobs), at + 1'000 >= members);
      if (!added || added->status != GroupResult::Status::accepted) throw std::runtime_error("flows: members not added");
    }
    const int64_t start = steady_us();
    start_workers(cluster, "fan", 2, 64, record.string());
    auto end = client.wait("callback", "fan", std::chrono::seconds(600));
    if (!end || end->state != JobEnd::State::done) throw std::runtime_error("flows: the callback did not run");
    f["fan_in_drain_s"] = static_cast<double>(steady_us() - start) / 1e6;
    auto starts = first_starts_us(record);
    int64_t last_member = 0;
    for (const auto& [id, us] : starts)
      if (id != "callback") last_member = std::max(last_member, us);
    f["fan_in_callback_after_last_member_ms"] = static_cast<double>(starts.at("callback") - last_member) / 1000.0;

    progress(fmt::format("flows: {} flows of a parent and 9 children", flows_n));
    for (int i = 0; i < flows_n; ++i) {
      FlowJob root{{.queue = "fan", .type = "noop", .id = fmt::format("p{}", i)}};
      for (int c = 0; c < 9; ++c) root.children.push_back(FlowJob{{.queue = "fan", .type = "noop", .id = fmt::format("p{}c{}", i, c)}});
      if (!client.enqueue_flow("fan", std::move(root))) throw std::runtime_error("flows: a flow was not sent");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    await([&] { return done_count(cluster, "fan") >= static_cast<int64_t>(members) + 1 + int64_t{flows_n} * 10; }, 120s);
    starts = first_starts_us(record);
    std::vector<double> after_ms;
    for (int i = 0; i < flows_n; ++i) {
      int64_t last_child = 0;
      for (int c = 0; c < 9; ++c) last_child = std::max(last_child, starts.at(fmt::format("p{}c{}", i, c)));
      after_ms.push_back(static_cast<double>(starts.at(fmt::format("p{}", i)) - last_child) / 1000.0);
    }
    f["parent_after_last_child_ms_p50"] = percentile(after_ms, 50);
    f["parent_after_last_child_ms_p99"] = percentile(after_ms, 99);
  }
  {
    Cluster cluster;
    progress(fmt::format("flows: {} requests of 10 jobs as flows, then as plain batches", requests));
    f["flow_enqueue_jobs_per_s"] = enqueue_rate(cluster, "as-flows", requests, true);
    f["plain_enqueue_jobs_per_s"] = enqueue_rate(cluster, "as-plain", requests, false);
    f["flow_vs_plain_enqueue"] = f["flow_enqueue_jobs_per_s"] / f["plain_enqueue_jobs_per_s"];
  }
  {
    Cluster cluster;
    Client client(cluster.endpoint(), with_timeouts({}));
    const int64_t due = wall_ms() + 3'600'000;
    progress(fmt::format("flows: Redis bytes of {} jobs as batch members and as plain jobs", sized));
    f["bytes_per_plain_job"] = bytes_per_job(cluster, sized, [&] {
      enqueue_all(cluster.endpoint(), noop_jobs(sized, "plain", due), 2);
    });
    f["bytes_per_batch_member"] = bytes_per_job(cluster, sized, [&] {
      auto opened = client.open_batch("sized", "b", {});
      if (!opened || opened->status != GroupResult::Status::accepted) throw std::runtime_error("flows: the sized batch did not open");
      for (size_t at = 0; at < sized; at += 1'000) {
        std::vector<JobSpec> jobs;
        for (size_t i = at; i < at + 1'000; ++i) jobs.push_back({.queue = "sized", .type = "noop", .id = fmt::format("{:08}", i), .due_ms = due});
        auto added = client.add_to_batch("sized", "b", std::move(jobs));
        if (!added || added->status != GroupResult::Status::accepted) throw std::runtime_error("flows: sized members not added");
      }
    });
    f["bytes_per_flow_child"] = bytes_per_job(cluster, sized, [&] {
      for (size_t at = 0; at < sized; at += 100) {
        FlowJob root{{.queue = "flowsized", .type = "noop", .id = fmt::format("r{:08}", at), .due_ms = due}};
        for (size_t i = at + 1; i < at + 100; ++i)
          root.children.push_back(FlowJob{{.queue = "flowsized", .type = "noop", .id = fmt::format("{:08}", i), .due_ms = due}});
        auto put = client.enqueue_flow("flowsized", std::move(root));
        if (!put || put->status != GroupResult::Status::accepted) throw std::runtime_error("flows: a sized flow was not accepted");
      }
    });
    f["group_bytes_per_batch_member"] = group_bytes_per_member(cluster, "sized", sized);
    f["group_bytes_per_flow_child"] = group_bytes_per_member(cluster, "flowsized", sized - sized / 100);
  }
  table.push_back({{"fan_in_members", members},
                   {"callback_after_last_member_ms", f["fan_in_callback_after_last_member_ms"]},
                   {"parent_after_last_child_p99_ms", f["parent_after_last_child_ms_p99"]},
                   {"flow_vs_plain_enqueue", f["flow_vs_plain_enqueue"]},
                   {"group_bytes_per_batch_member", f["group_bytes_per_batch_member"]},
                   {"group_bytes_per_flow_child", f["group_bytes_per_flow_child"]},
                   {"bytes_per_plain_job", f["bytes_per_plain_job"]}});
  return f;
}

}  // namespace dueq::bench
