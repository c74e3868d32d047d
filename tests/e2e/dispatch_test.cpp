// End-to-end rules of dispatch: frame and capacity limits, how batches
// and free slots are shared among workers and queues, the cap on queues,
// and how deep a worker without --prefetch buffers.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <zmq.hpp>

#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "broker/loop/dispatcher.hpp"
#include "broker/loop/registry.hpp"
#include "broker/store/redis_client.hpp"
#include "common/clock.hpp"
#include "common/protocol.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/process_figures.hpp"
#include "tests/support/hit_and_run.hpp"
#include "tests/support/raw_peer.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

// A frame above the 16 MiB limit is refused by libzmq before it is
// buffered: eight 64 MiB frames leave the broker's memory as it was, and a
// healthy producer next to them is served.
TEST(EndToEnd, FramesAboveTheSizeLimitAreNotBuffered) {
  Cluster cluster;
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"ok", "t", "", "before", Client::in_ms(3'600'000), 3}));
  const int64_t before = memory_kb(cluster.broker().pid(), "VmRSS:");
  const std::string huge(64u << 20, '\x00');
  for (int i = 0; i < 8; ++i) {
    zmq::context_t context;
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 2000);
    socket.connect(cluster.endpoint());
    socket.send(zmq::buffer(huge), zmq::send_flags::none);
  }
  ASSERT_TRUE(client.enqueue({"ok", "t", "", "after", Client::in_ms(3'600'000), 3}));
  const int64_t after = memory_kb(cluster.broker().pid(), "VmRSS:");
  EXPECT_LT(after - before, 64 * 1024) << "broker RSS grew from " << before << " kB to " << after << " kB";
  EXPECT_TRUE(cluster.broker().running());
  EXPECT_EQ(cluster.stats("ok")->scheduled, 2);
}

// A worker warmed on no-op jobs buffers hundreds; when the jobs that follow
// take 500 ms it hands back what it cannot start soon, and a second worker
// runs its share instead of idling while they wait in the first one's buffer.
TEST(EndToEnd, AWorkerWhoseJobsGetLongerHandsBackWhatItCannotStartSoon) {
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("longer", 4, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  std::vector<JobSpec> warm;
  for (int i = 0; i < 3000; ++i) warm.push_back({"longer", "noop", "", fmt::format("warm-{}", i), 0, 3});
  ASSERT_TRUE(client.enqueue_batch(warm));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("longer"); return s && s->done == 3000; }, 30s));
  cluster.start_example_worker("longer", 4, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(2));
  std::vector<JobSpec> slow;
  for (int i = 0; i < 100; ++i) slow.push_back({"longer", "sleep", "500", fmt::format("slow-{}", i), 0, 3});
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(client.enqueue_batch(slow));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("longer"); return s && s->done == 3100; }, 60s));
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::map<int, int> slow_by_pid;
  for (const auto& r : read_records(record))
    if (r.id.starts_with("slow-")) ++slow_by_pid[r.pid];
  ASSERT_EQ(slow_by_pid.size(), 2u) << "one worker ran every slow job";
  for (const auto& [pid, n] : slow_by_pid) EXPECT_GE(n, 30) << "worker " << pid << " ran " << n << " of 100";
  EXPECT_EQ(cluster.stats("longer")->dead, 0);
  std::printf("[ figures  ] 100 x 500 ms jobs after a no-op warm-up, 2 workers x 4 handlers: %.1f s (one worker: 12.5 s "
              "of handler time)\n", took_s);
}

// Credit is per worker: two queues served by one worker lease no more than
// its free slots between them. Counted per queue, both leased its whole
// capacity in the same round and one handed its jobs back (as retries).
TEST(EndToEnd, TwoQueuesOnOneWorkerNeverLeaseTheSameFreeSlot) {
  Cluster cluster;
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (const char* queue : {"qa", "qb"})
    for (int i = 0; i < 8; ++i) jobs.push_back({queue, "sleep", "2000", fmt::format("{}-{}", queue, i), 0, 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "qa", "--queue", "qb",
                        "--concurrency", "4", "--prefetch", "4"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  auto in_flight = [&] {
    auto a = cluster.stats("qa"), b = cluster.stats("qb");
    return a && b ? a->in_flight + b->in_flight : -1;
  };
  ASSERT_TRUE(eventually([&] { return in_flight() == 8; }, 10s));
  EXPECT_EQ(cluster.stats("qa")->retried, 0);
  EXPECT_EQ(cluster.stats("qb")->retried, 0);
  ASSERT_TRUE(eventually([&] { return cluster.stats("qa")->done + cluster.stats("qb")->done == 16; }, 30s));
  EXPECT_EQ(cluster.stats("qa")->retried + cluster.stats("qb")->retried, 0) << "a job was handed back";
}

// What a worker announces does not decide what it is sent:
// max_worker_capacity does.
TEST(EndToEnd, AWorkerIsSentNoMoreThanMaxWorkerCapacity) {
  const auto config_dir = make_temp_dir("capacity");
  std::ofstream(config_dir / "broker.toml") << "max_worker_capacity = 3\n";
  Cluster cluster({"--config", (config_dir / "broker.toml").string()});
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "cap", "--concurrency", "20",
                        "--exec", "t=sleep 30", "--timeout", "60s"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  EXPECT_EQ(cluster.log_count("announced"), 1u) << "the cap is logged";
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 10; ++i) jobs.push_back({"cap", "t", "", "c" + std::to_string(i), 0, 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("cap"); return s && s->in_flight == 3; }, 10s));
  std::this_thread::sleep_for(1s);
  auto s = cluster.stats("cap");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->in_flight, 3);
  EXPECT_EQ(s->waiting, 7);
  std::filesystem::remove_all(config_dir);
}

// A lease batch goes to one worker while that worker holds less than half
// its capacity, the next batch starts at the next worker, and past half of
// every worker's capacity jobs are spread one each in turn (dispatcher.cpp):
// a round of a few short jobs is one TASKS frame that wakes one worker, and
// long jobs (capacity about twice the concurrency) still reach every worker.
TEST(EndToEnd, EachBatchGoesToOneWorkerInTurnUntilItIsHalfFull) {
  Cluster cluster;
  RawPeer a(cluster.endpoint(), "worker-a"), b(cluster.endpoint(), "worker-b");
  for (auto [peer, id] : {std::pair{&a, "worker-a"}, std::pair{&b, "worker-b"}}) {
    peer->send(proto::Hello{id, {"turns"}, 10, {}, "host", 1});
    auto welcome = peer->receive();
    ASSERT_TRUE(welcome && std::holds_alternative<proto::Welcome>(*welcome));
  }
  Client client(cluster.endpoint());
  auto enqueue = [&](const std::string& prefix, int count) {
    std::vector<JobSpec> jobs;
    for (int i = 0; i < count; ++i) jobs.push_back({"turns", "noop", "", prefix + std::to_string(i), 0, 3});
    auto results = client.enqueue_batch(jobs);
    ASSERT_TRUE(results);
    for (const auto& r : *results) ASSERT_EQ(r.status, EnqueueResult::Status::accepted) << r.id;
  };
  // (TASKS frames, jobs in them) a peer is sent until it has been quiet for
  // 200 ms. Like a worker, each peer says RECEIVED for a frame and
  // heartbeats the jobs it holds (or the broker hands them back, or declares
  // the peer dead).
  std::map<RawPeer*, std::vector<proto::JobRef>> held;
  auto heartbeat = [&] {
    for (RawPeer* peer : {&a, &b}) peer->send(proto::Heartbeat{held[peer], 10, false});
  };
  auto tasks_of = [&](RawPeer& peer) {
    std::pair<int, size_t> got{0, 0};
    heartbeat();
    while (auto frame = peer.receive(200ms)) {
      if (auto* tasks = std::get_if<proto::Tasks>(&*frame)) {
        peer.send(proto::Received{tasks->seq});
        for (const auto& task : tasks->items) held[&peer].push_back({task.queue, task.id, task.token});
        heartbeat();
        ++got.first;
        got.second += tasks->items.size();
      }
    }
    return got;
  };
  using Got = std::pair<int, size_t>;
  enqueue("first-", 4);
  const Got first_a = tasks_of(a), first_b = tasks_of(b);
  ASSERT_EQ(first_a.second + first_b.second, 4u);
  EXPECT_TRUE((first_a == Got{1, 4} && first_b == Got{0, 0}) || (first_a == Got{0, 0} && first_b == Got{1, 4}))
      << "a got " << first_a.second << " jobs in " << first_a.first << " frames, b " << first_b.second << " in "
      << first_b.first;
  RawPeer& took_first = first_a.second == 4 ? a : b;
  RawPeer& other = first_a.second == 4 ? b : a;

  enqueue("second-", 4);
  EXPECT_EQ(tasks_of(other), (Got{1, 4})) << "the next batch goes to the next worker";
  EXPECT_EQ(tasks_of(took_first), (Got{0, 0}));

  // Each holds 4 of 10: one more job each reaches half, and the other 6 go
  // one each in turn (filling one worker would give it 6 and the other 2).
  enqueue("third-", 8);
  EXPECT_EQ(tasks_of(a), (Got{1, 4}));
  EXPECT_EQ(tasks_of(b), (Got{1, 4}));
}

// Queues cost the broker work every turn: their number is capped, and
// queues only HELLOs made up are forgotten when no live worker serves them.
// A healthy worker and producer next to it lose nothing.
TEST(EndToEnd, QueuesAreCappedAndMadeUpOnesForgotten) {
  const auto config_dir = make_temp_dir("queues");
  std::ofstream(config_dir / "broker.toml") << "max_queues = 5\n";
  Cluster cluster({"--config", (config_dir / "broker.toml").string()});
  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker("ok", 2, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"ok", "noop", "", "healthy-1", 0, 3}));

  RawPeer flooder(cluster.endpoint(), "flooder");
  flooder.send(proto::Hello{"flooder", {"a1", "a2", "a3"}, 1, {}, "h", 1});
  auto answer = flooder.receive();
  ASSERT_TRUE(answer && std::holds_alternative<proto::Welcome>(*answer));
  RawPeer second(cluster.endpoint(), "second");
  second.send(proto::Hello{"second", {"b1", "b2"}, 1, {}, "h", 1});
  answer = second.receive();
  ASSERT_TRUE(answer && std::holds_alternative<proto::ErrorFrame>(*answer));
  EXPECT_NE(std::get<proto::ErrorFrame>(*answer).message.find("max_queues"), std::string::npos);

  auto fifth = client.enqueue({"c1", "noop", "", "c1-job", Client::in_ms(3'600'000), 3});
  ASSERT_TRUE(fifth);
  EXPECT_EQ(fifth->status, EnqueueResult::Status::accepted);
  auto sixth = client.enqueue({"c2", "noop", "", "c2-job", Client::in_ms(3'600'000), 3});
  ASSERT_TRUE(sixth);
  EXPECT_EQ(sixth->status, EnqueueResult::Status::rejected);
  EXPECT_NE(sixth->reason.find("max_queues"), std::string::npos) << sixth->reason;

  // The flooder falls silent: its made-up queues are forgotten.
  EXPECT_TRUE(eventually([&] {
    auto r = client.enqueue({"c2", "noop", "", "c2-job", Client::in_ms(3'600'000), 3});
    return r && r->status == EnqueueResult::Status::accepted;
  }, 10s));
  ASSERT_TRUE(client.enqueue({"ok", "noop", "", "healthy-2", 0, 3}));
  EXPECT_TRUE(eventually([&] { auto s = cluster.stats("ok"); return s && s->done == 2; }, 10s));
  std::filesystem::remove_all(config_dir);
}

namespace {

// The capacities the broker learnt from a worker, in order: the one in its
// HELLO (the line "worker W ... joined: ..., capacity C, ...") and those of
// its heartbeats (the debug lines "worker W capacity A -> B").
std::vector<int> capacities_announced(Cluster& cluster) {
  std::vector<int> to;
  std::istringstream log(read_file(cluster.dir() / "broker.log"));
  for (std::string line; std::getline(log, line);) {
    if (line.find(" joined: ") != std::string::npos) {
      if (auto at = line.find(", capacity "); at != std::string::npos) to.push_back(std::stoi(line.substr(at + 11)));
    } else if (auto at = line.find(" -> "); at != std::string::npos && line.find(" capacity ") != std::string::npos) {
      to.push_back(std::stoi(line.substr(at + 4)));
    }
  }
  return to;
}

// Runs `jobs` jobs of `type` (payload `payload`) on one example worker with
// 4 handlers and no --prefetch; returns the capacities it announced.
std::vector<int> capacities_while_running(const std::string& type, const std::string& payload, int jobs) {
  Cluster cluster({"--log-level", "debug"});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "q", "--concurrency", "4"});
  EXPECT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  std::vector<JobSpec> batch;
  for (int i = 0; i < jobs; ++i) batch.push_back({"q", type, payload, "", 0, 0});
  for (size_t at = 0; at < batch.size(); at += 1000)
    EXPECT_TRUE(client.enqueue_batch({batch.begin() + at, batch.begin() + std::min(batch.size(), at + 1000)}));
  EXPECT_TRUE(eventually([&] { auto s = cluster.stats("q"); return s && s->done == jobs; }, 60s));
  return capacities_announced(cluster);
}

}  // namespace

// Without --prefetch a worker buffers according to its handlers' run time:
// short handlers get a deep buffer (announced beyond 2 x concurrency), long
// ones keep concurrency + concurrency.
TEST(EndToEnd, AWorkerWithoutPrefetchBuffersDeeplyForShortHandlersOnly) {
  const auto fast = capacities_while_running("noop", "", 20'000);
  ASSERT_GE(fast.size(), 2u) << "no capacity change announced for no-op handlers";
  EXPECT_GT(*std::max_element(fast.begin(), fast.end()), 100) << "a deep buffer for no-op handlers";
  const auto slow = capacities_while_running("sleep", "30", 40);
  ASSERT_FALSE(slow.empty()) << "the broker logged no capacity of the worker";
  for (int capacity : slow) EXPECT_LE(capacity, 8) << "30 ms handlers buffer no more than their concurrency";
  std::printf("[ figures  ] capacities announced: no-op handlers %s; 30 ms handlers %s\n",
              fmt::format("{}", fmt::join(fast, ", ")).c_str(), fmt::format("{}", fmt::join(slow, ", ")).c_str());
}

// A worker wakes few threads for short jobs (worker/wake_policy.hpp); a long
// job among them must not hold the others back while threads sleep: a job
// waiting behind it gets a thread of its own within about a millisecond.
TEST(EndToEnd, AJobBehindALongOneStartsWhileHandlerThreadsAreIdle) {
  Cluster cluster;
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "q", "--concurrency", "4"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  std::vector<JobSpec> warm_up;
  for (int i = 0; i < 300; ++i) warm_up.push_back({"q", "noop", "", "", 0, 0});
  ASSERT_TRUE(client.enqueue_batch(warm_up));  // the worker learns its handlers are short
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("q"); return s && s->done == 300; }, 30s));
  // One call, one lease, one TASKS frame: the long job sorts first.
  ASSERT_TRUE(client.enqueue_batch({{"q", "sleep", "8000", "a-long", 0, 0}, {"q", "noop", "", "b-short", 0, 0}}));
  EXPECT_TRUE(eventually([&] { auto s = cluster.stats("q"); return s && s->done == 301; }, 6s))
      << "the short job waited for the long one";
  auto s = cluster.stats("q");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->in_flight, 1) << "the long job is still running";
}
