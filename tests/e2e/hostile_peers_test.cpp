// End-to-end rules against hostile peers: the open-file limit, bursts of
// hit-and-run HELLOs, floods beside a healthy worker, malformed frames and
// invalid jobs. Each is answered and bounded, and nothing is lost.
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

// At the open-file limit libzmq fails each accept() and, the peer still
// waiting, tries again at once: a busy loop (a43b6cc: both cores, 7.9 M
// failed accepts per 10 s). The broker releases its descriptor reserve so
// the waiting peers are accepted, turns new sessions away through ZAP until
// the reserve is back (the back-off doubling from 100 ms), logs both with
// the limit (rate-limited), and uses under 5% of a core while 40 peers keep
// trying; the worker and producer connected before keep being served.
TEST(EndToEnd, ConnectionsPastTheOpenFileLimitAreTurnedAwayWithoutSpinning) {
  // Under UBSan, a vptr check that misses the sanitizer's type cache probes
  // the object's memory through pipe(2); with no descriptor left the probe
  // fails and a sound object is reported as having an "invalid vptr" (this
  // stopped the sanitized broker in fmt's buffer, "<memory cannot be
  // printed>"). A suppression cannot help: libubsan reads its suppressions
  // file at its first report, when no descriptor is left to open it. vptr
  // reports are recoverable in the sanitized build (CMakeLists.txt), so the
  // broker this test starves runs with halt_on_error=0, and the test fails on
  // any report but that one.
  const char* found = std::getenv("UBSAN_OPTIONS");
  const std::optional<std::string> inherited = found != nullptr ? std::optional<std::string>(found) : std::nullopt;
  ::setenv("UBSAN_OPTIONS", (inherited.value_or("") + (inherited ? ":" : "") + "halt_on_error=0:print_stacktrace=0").c_str(), 1);
  Cluster cluster;
  if (inherited) {
    ::setenv("UBSAN_OPTIONS", inherited->c_str(), 1);
  } else {
    ::unsetenv("UBSAN_OPTIONS");
  }
  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker("fds", 2, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"fds", "noop", "", "before", 0, 1}));
  const pid_t broker = cluster.broker().pid();
  const auto open_files = static_cast<rlim_t>(std::distance(
      std::filesystem::directory_iterator("/proc/" + std::to_string(broker) + "/fd"), std::filesystem::directory_iterator{}));
  const rlimit lowered{open_files + 4, open_files + 4};
  ASSERT_EQ(::prlimit(broker, RLIMIT_NOFILE, &lowered, nullptr), 0) << std::strerror(errno);

  zmq::context_t context;
  std::vector<zmq::socket_t> flood;
  for (int i = 0; i < 40; ++i) {
    flood.emplace_back(context, zmq::socket_type::dealer);
    flood.back().set(zmq::sockopt::linger, 0);
    flood.back().connect(cluster.endpoint());
  }
  ASSERT_TRUE(eventually([&] { return cluster.log_count("could not accept") >= 1; }, 10s));
  EXPECT_EQ(cluster.log_count(fmt::format("open-file limit is {}", open_files + 4)), cluster.log_count("could not accept"));
  ASSERT_TRUE(client.enqueue({"fds", "noop", "", "during", 0, 1}));
  // A new connection would be refused now: the stats come over the producer's.
  auto done = [&] {
    auto s = stats_via(client, "fds");
    return s ? s->done : int64_t{-1};
  };
  ASSERT_TRUE(eventually([&] { return done() == 2; }, 10s));
  ASSERT_TRUE(eventually([&] { return cluster.log_count("turned") >= 1; }, 15s)) << "no session was turned away";
  // A new producer is told at once, before its one 1 s attempt times out
  // (the link check alone would wait 60 s). Once the flood's peers are in,
  // a descriptor may be free: a newcomer that finds one is served (into a
  // queue no worker takes, so the counts below stay). So each try comes
  // right behind eight more flooding peers, which put the broker past its
  // limit again.
  {
    std::optional<ClientError> refusal;
    for (int n = 0; n < 20 && !refusal; ++n) {
      for (int i = 0; i < 8; ++i) {
        flood.emplace_back(context, zmq::socket_type::dealer);
        flood.back().set(zmq::sockopt::linger, 0);
        flood.back().connect(cluster.endpoint());
      }
      Client newcomer(cluster.endpoint(), ClientOptions{.timeout_ms = 1'000, .attempts = 1, .connect_timeout_ms = 60'000});
      auto r = newcomer.enqueue({"fds-newcomers", "noop", "", fmt::format("newcomer-{}", n), 0, 1});
      if (!r) refusal = r.error();
    }
    ASSERT_TRUE(refusal) << "20 newcomers were all served at the open-file limit";
    EXPECT_EQ(refusal->code, "unavailable") << refusal->message;
    EXPECT_NE(refusal->message.find("open-file limit"), std::string::npos) << refusal->message;
  }
  const int64_t cpu_before = cpu_ms(broker);
  std::this_thread::sleep_for(5s);
  const int64_t cpu = cpu_ms(broker) - cpu_before;
  std::printf("[ figures  ] 5 s at the open-file limit with 40 peers trying: broker CPU %lld ms, %zu lines 'could not "
              "accept', %zu lines 'turned ... away'\n",
              static_cast<long long>(cpu), cluster.log_count("could not accept"), cluster.log_count("new connections away"));
  EXPECT_LT(cpu, 250) << "more than 5% of a core";
  EXPECT_LE(cluster.log_count("could not accept"), 2u) << "refusals are logged at most once per 10 s";
  EXPECT_LE(cluster.log_count("new connections away at the open-file limit"), 2u) << "at most once per 10 s";
  const auto after = client.enqueue({"fds", "noop", "", "after", 0, 1});
  ASSERT_TRUE(after) << after.error().message;
  EXPECT_TRUE(eventually([&] { return done() == 3; }, 10s));
  // The flood ends: once its reserve is back the broker admits new peers.
  flood.clear();
  EXPECT_TRUE(eventually([&] {
    Client newcomer(cluster.endpoint(), ClientOptions{.timeout_ms = 1'000, .attempts = 1});
    auto r = newcomer.enqueue({"fds", "noop", "", "newcomer", 0, 1});
    return r && r->status == EnqueueResult::Status::accepted;
  }, 30s));
  EXPECT_TRUE(eventually([&] { return cluster.log_count("accepting new connections again") >= 1; }, 10s));
  EXPECT_TRUE(cluster.broker().running());
  EXPECT_EQ(cluster.log_count("runtime error: "), cluster.log_count("note: object has invalid vptr\n<memory cannot be printed>"))
      << "a UBSan report other than the failed vptr probe";
}

// Hostile and buggy peers next to a healthy worker and producer, all at
// once: a squatter that says HELLO with a huge capacity every 1.7 s and never
// reads, a flood of HELLOs from new identities naming made-up queues, a slow
// reader asking for stats without reading the answers, and a producer that
// pipelines enqueues without reading into a queue at its max_backlog. The
// healthy producer's jobs all run, none dead; the figures line reports the
// broker's memory and CPU and the healthy producer's enqueue latency.
// HOSTILE=<bits> runs some of them only, to see what each costs: 1 squatter,
// 2 HELLO flood, 4 slow reader, 8 pipelining producer.
// 6,000 hit-and-run HELLOs under distinct routing ids, each taking what the
// broker sends it and vanishing, beside a healthy worker: deliveries nobody
// was seen to start charge no attempt, so not one of 1,000 max_attempts=1
// jobs ends dead (a43b6cc: 1,916 of 2,000 beside 12,000, per the issue's
// measurement).
TEST(EndToEnd, ABurstOfHitAndRunHellosSendsNoJobToTheDeadLetters) {
  Cluster cluster;
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 1000; ++i) jobs.push_back({"burst", "sleep", "5", fmt::format("job-{}", i), 0, 1});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  const pid_t broker = cluster.broker().pid();
  const int64_t rss_before_kb = memory_kb(broker, "VmRSS:");
  cluster.start_example_worker("burst", 2, (cluster.dir() / "starts.txt").string());
  std::atomic<int> hellos{0}, deliveries_taken{0};
  const auto give_up = std::chrono::steady_clock::now() + 90s;
  std::vector<std::thread> peers;
  for (int t = 0; t < 4; ++t)
    peers.emplace_back([&, t] {
      zmq::context_t context;
      for (int i = t; i < 6'000 && std::chrono::steady_clock::now() < give_up; i += 4) {
        deliveries_taken += hit_and_run(context, cluster.endpoint(), "burst", i);
        ++hellos;
      }
    });
  for (auto& p : peers) p.join();
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("burst"); return s && s->done + s->dead == 1000; }, 120s));
  auto s = cluster.stats("burst");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->dead, 0);
  EXPECT_EQ(s->done, 1000);
  EXPECT_TRUE(cluster.broker().running());
  std::printf("[ figures  ] %d hit-and-run HELLOs took %d TASKS frames: %lld dead, %lld done; broker RSS %lld -> %lld kB\n",
              hellos.load(), deliveries_taken.load(), static_cast<long long>(s->dead), static_cast<long long>(s->done),
              static_cast<long long>(rss_before_kb), static_cast<long long>(memory_kb(broker, "VmRSS:")));
}

TEST(EndToEnd, HostilePeersBesideAHealthyWorkerLoseNothing) {
  const auto config_dir = make_temp_dir("hostile");
  std::ofstream(config_dir / "broker.toml") << "[queues.flood]\nmax_backlog = 20000\n";
  Cluster cluster({"--config", (config_dir / "broker.toml").string()});
  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker("good", 8, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  const pid_t broker = cluster.broker().pid();
  const int64_t rss_before_kb = memory_kb(broker, "VmRSS:");
  const int64_t cpu_before_ms = cpu_ms(broker);

  std::atomic<bool> stop{false};
  std::vector<std::thread> hostile;
  const int mask = std::getenv("HOSTILE") ? std::atoi(std::getenv("HOSTILE")) : 31;
  if (mask & 1) hostile.emplace_back([&] {  // squatter
    RawPeer squatter(cluster.endpoint(), "squatter");
    while (!stop) {
      squatter.send(proto::Hello{"squatter", {"good"}, 10'000, {}, "host", 1});
      for (int i = 0; i < 17 && !stop; ++i) std::this_thread::sleep_for(100ms);
    }
  });
  if (mask & 2) hostile.emplace_back([&] {  // HELLO flood, made-up queues
    zmq::context_t context;
    for (int round = 0; !stop; ++round) {
      zmq::socket_t peer(context, zmq::socket_type::dealer);
      peer.set(zmq::sockopt::linger, 0);
      peer.set(zmq::sockopt::routing_id, fmt::format("flood-{}", round));
      peer.connect(cluster.endpoint());
      proto::Hello hello{fmt::format("flood-{}", round), {}, 1024, {}, "host", 1};
      for (int q = 0; q < 200; ++q) hello.queues.push_back(fmt::format("made-up-{}-{}", round, q));
      const std::string bytes = proto::encode(hello);
      peer.send(zmq::buffer(bytes), zmq::send_flags::none);
      std::this_thread::sleep_for(20ms);
    }
  });
  if (mask & 4) hostile.emplace_back([&] {  // slow reader
    zmq::context_t context;
    zmq::socket_t peer(context, zmq::socket_type::dealer);
    peer.set(zmq::sockopt::linger, 0);
    peer.set(zmq::sockopt::sndhwm, 0);
    peer.connect(cluster.endpoint());
    for (uint64_t id = 1; !stop; ++id) {
      const std::string bytes = proto::encode(proto::StatsRequest{id});
      (void)peer.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
      if (id % 100 == 0) std::this_thread::sleep_for(1ms);
    }
  });
  if (mask & 8) hostile.emplace_back([&] {  // pipelining producer that never reads
    zmq::context_t context;
    zmq::socket_t peer(context, zmq::socket_type::dealer);
    peer.set(zmq::sockopt::linger, 0);
    peer.connect(cluster.endpoint());
    for (uint64_t id = 1; !stop; ++id) {
      proto::Enqueue enqueue{id, {}};
      for (int j = 0; j < 100; ++j)
        enqueue.jobs.push_back(proto::NewJob{"flood", fmt::format("f-{}-{}", id, j), "noop", proto::Bytes{std::string(1000, 'x')}, 0, 0});
      const std::string bytes = proto::encode(enqueue);
      (void)peer.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
      std::this_thread::sleep_for(1ms);
    }
  });

  if (mask & 16) hostile.emplace_back([&] {  // pipelining flows of 1,000 jobs (1 MB each request) without reading
    zmq::context_t context;
    zmq::socket_t peer(context, zmq::socket_type::dealer);
    peer.set(zmq::sockopt::linger, 0);
    peer.connect(cluster.endpoint());
    for (uint64_t id = 1; !stop; ++id) {
      proto::GroupEnqueue flow{id, "flood", "", proto::BatchAction::none, false, {}};
      for (uint32_t j = 0; j < 1'000; ++j)
        flow.jobs.push_back(proto::GroupJob{proto::NewJob{"flood", fmt::format("g-{}-{}", id, j), "noop", proto::Bytes{std::string(1000, 'x')}, 0, 0},
                                            j == 0 ? 0u : 1u, j == 0 ? proto::ChildFailure::none : proto::ChildFailure::ignore});
      const std::string bytes = proto::encode(flow);
      (void)peer.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
      std::this_thread::sleep_for(1ms);
    }
  });

  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 10'000, .attempts = 3});
  std::vector<double> latency_ms;
  int64_t max_rss_kb = rss_before_kb;
  // Enough one-at-a-time jobs to cross every flood several times (the
  // floods repeat every 2 s at most; each job waits its turn behind them, so
  // 12 take about 15 s in the sanitized suite); more only lengthen it.
  constexpr int kJobs = 12;
  for (int i = 0; i < kJobs; ++i) {
    const int64_t t0 = wall_us();
    auto r = client.enqueue({"good", "noop", "", fmt::format("good-{}", i), 0, 0});
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_EQ(r->status, EnqueueResult::Status::accepted) << r->reason;
    latency_ms.push_back(static_cast<double>(wall_us() - t0) / 1000.0);
    if (i % 5 == 0) max_rss_kb = std::max(max_rss_kb, memory_kb(broker, "VmRSS:"));
    std::this_thread::sleep_for(5ms);
  }
  auto good_done = [&] {
    auto s = stats_via(client, "good");
    return s ? s->done : int64_t{-1};
  };
  const bool all_ran = eventually([&] { return good_done() == kJobs; }, 60s);
  const int64_t cpu_during_ms = cpu_ms(broker) - cpu_before_ms;
  max_rss_kb = std::max(max_rss_kb, memory_kb(broker, "VmRSS:"));
  stop = true;
  for (auto& t : hostile) t.join();
  ASSERT_TRUE(all_ran) << "done: " << good_done();
  std::set<std::string> ran;
  for (const auto& r : read_records(record)) ran.insert(r.id);
  EXPECT_EQ(ran.size(), static_cast<size_t>(kJobs));
  const auto good = stats_via(client, "good");
  ASSERT_TRUE(good);
  const int64_t good_dead = good->dead;
  EXPECT_EQ(good_dead, 0);
  EXPECT_TRUE(cluster.broker().running());
#ifdef DUEQ_SANITIZED
  constexpr int64_t kGrowthBoundKb = 1'000'000;  // ASan keeps up to 256 MB of freed memory, plus shadow
#else
  constexpr int64_t kGrowthBoundKb = 500'000;
#endif
  EXPECT_LT(max_rss_kb - rss_before_kb, kGrowthBoundKb) << "broker memory grew past " << kGrowthBoundKb / 1000 << " MB";
  std::filesystem::remove_all(config_dir);
  std::printf("[ figures  ] hostile peers: broker RSS %lld -> max %lld MB, broker CPU %.1f s; healthy producer "
              "enqueue p50 %.2f ms, p99 %.2f ms, max %.2f ms; %d of %d jobs ran, %lld dead\n",
              static_cast<long long>(rss_before_kb / 1024), static_cast<long long>(max_rss_kb / 1024),
              static_cast<double>(cpu_during_ms) / 1000.0, percentile(latency_ms, 50), percentile(latency_ms, 99),
              percentile(latency_ms, 100), static_cast<int>(ran.size()), kJobs, static_cast<long long>(good_dead));
}

TEST(EndToEnd, MalformedFramesAreAnsweredWithAnErrorAndChangeNothing) {
  Cluster cluster;
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(cluster.endpoint());
  // The last: 16 MB of nested nils, 16 million values (stopped at 100,000).
  std::string nested_nils("\x93\x01\x06\xdd\x00\x00\x4a\x38", 8);  // [1, 6, [19,000 arrays]]
  for (int i = 0; i < 19'000; ++i) nested_nils += "\xdc\x03\x48" + std::string(840, '\xc0');
  const std::vector<std::string> hostile = {"", "\xc1", "garbage", std::string(100, '\x91'),
                                            proto::encode(proto::Pong{"not for the broker"}), nested_nils};
  for (const auto& bytes : hostile) {
    socket.send(zmq::buffer(bytes), zmq::send_flags::none);
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(5000)), 1) << "no answer to a bad frame";
    zmq::message_t reply;
    ASSERT_TRUE(socket.recv(reply));
    auto frame = proto::decode(reply.to_string_view());
    ASSERT_TRUE(frame);
    ASSERT_TRUE(std::holds_alternative<proto::ErrorFrame>(*frame));
    EXPECT_EQ(std::get<proto::ErrorFrame>(*frame).code, "bad_frame");
    if (&bytes == &hostile.back()) {
      EXPECT_NE(std::get<proto::ErrorFrame>(*frame).message.find("more than 110000 values"), std::string::npos)
          << std::get<proto::ErrorFrame>(*frame).message;
    }
  }
  EXPECT_TRUE(cluster.broker().running());
  EXPECT_EQ(cluster.queue_keys(), "");
  Client client(cluster.endpoint());
  EXPECT_TRUE(client.stats());
}

TEST(EndToEnd, InvalidJobsInABatchAreRejectedOneByOne) {
  Cluster cluster;
  Client client(cluster.endpoint());
  auto results = client.enqueue_batch({{"good", "t", "p", "ok-1", 0, 0},
                                       {"bad queue", "t", "p", "bad-1", 0, 0},
                                       {"good", "", "p", "bad-2", 0, 0},
                                       {"good", "t", "p", "bad-3", -5, 0},
                                       {"good", "t", "p", "bad-4", 0, 5000},
                                       {"good", "t", std::string(proto::kMaxPayloadBytes + 1, 'x'), "bad-5", 0, 0},
                                       {"good", "t", "p", "ok-2", 0, 0}});
  ASSERT_TRUE(results);
  EXPECT_EQ((*results)[0].status, EnqueueResult::Status::accepted);
  EXPECT_EQ((*results)[6].status, EnqueueResult::Status::accepted) << "a job after an oversized one is accepted";
  for (size_t i = 1; i < 6; ++i) {
    EXPECT_EQ((*results)[i].status, EnqueueResult::Status::rejected) << i;
    EXPECT_FALSE((*results)[i].reason.empty());
  }
  EXPECT_NE((*results)[5].reason.find("payload exceeds 1 MiB"), std::string::npos) << (*results)[5].reason;
  auto s = cluster.stats("good");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->accepted, 2);
}
