// End-to-end rules with real processes: redis-server, dueq-broker, workers.
#include <gtest/gtest.h>
#include <zmq.hpp>

#include <set>
#include <unordered_map>

#include "common/clock.hpp"
#include "common/protocol.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

TEST(EndToEnd, TenThousandDelayedJobsEachRunOnceAndNeverEarly) {
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  for (int i = 0; i < 4; ++i) cluster.start_example_worker("timers", 8, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(4));

  constexpr int kJobs = 10'000;
  Client client(cluster.endpoint());
  const int64_t base = wall_ms() + 1'000;
  std::set<std::string> ids;
  const int64_t enqueue_start = wall_us();
  for (int batch = 0; batch < kJobs / 1000; ++batch) {
    std::vector<JobSpec> jobs;
    for (int i = batch * 1000; i < (batch + 1) * 1000; ++i)
      jobs.push_back(JobSpec{"timers", "noop", "", "", base + (static_cast<int64_t>(i) * 5000) / kJobs, 0});
    auto results = client.enqueue_batch(std::move(jobs));
    ASSERT_TRUE(results) << results.error().message;
    for (const auto& r : *results) {
      ASSERT_EQ(r.status, EnqueueResult::Status::accepted) << r.reason;
      ids.insert(r.id);
    }
  }
  const double enqueue_s = static_cast<double>(wall_us() - enqueue_start) / 1e6;
  ASSERT_EQ(ids.size(), static_cast<size_t>(kJobs));

  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("timers"); return s && s->done == kJobs; }, 60s))
      << "done: " << (cluster.stats("timers") ? cluster.stats("timers")->done : -1);

  const auto starts = read_records(record);
  std::unordered_map<std::string, int> runs;
  std::vector<double> lateness_ms;
  std::set<int> pids;
  int early = 0;
  for (const auto& s : starts) {
    ++runs[s.id];
    pids.insert(s.pid);
    const double late = static_cast<double>(s.start_us - s.due_ms * 1000) / 1000.0;
    if (late < 0) ++early;
    lateness_ms.push_back(late);
  }
  EXPECT_EQ(starts.size(), static_cast<size_t>(kJobs));
  for (const auto& id : ids) EXPECT_EQ(runs[id], 1) << "job " << id;
  EXPECT_EQ(early, 0) << "jobs started before their due time";
  EXPECT_EQ(pids.size(), 4u) << "every worker process took jobs";
  auto stats = cluster.stats("timers");
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->dead, 0);
  EXPECT_EQ(stats->in_flight, 0);
  EXPECT_EQ(stats->scheduled + stats->waiting, 0);
  std::printf("[ figures  ] %d jobs over 5 s, 4 workers: lateness p50 %.2f ms, p99 %.2f ms, max %.2f ms; "
              "enqueue %.0f jobs/s\n",
              kJobs, percentile(lateness_ms, 50), percentile(lateness_ms, 99), percentile(lateness_ms, 100),
              kJobs / enqueue_s);
}

TEST(EndToEnd, ExecWorkerGetsPayloadOnStdinAndJobFactsInTheEnvironment) {
  Cluster cluster;
  const auto out = cluster.dir() / "out";
  std::filesystem::create_directory(out);
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "cmd", "--concurrency", "2",
                        "--exec", "echo=cat > " + out.string() + "/$DUEQ_JOB_ID.payload; env | grep ^DUEQ_ | sort > " +
                                      out.string() + "/$DUEQ_JOB_ID.env",
                        "--exec", "fail=echo 'something broke' >&2; exit 7", "--exec", "slow=sleep 30",
                        "--timeout", "500ms"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"cmd", "echo", "hello\nworld", "job-echo", 0, 0}));
  ASSERT_TRUE(client.enqueue({"cmd", "fail", "x", "job-fail", 0, 1}));
  ASSERT_TRUE(client.enqueue({"cmd", "slow", "x", "job-slow", 0, 1}));
  ASSERT_TRUE(client.enqueue({"cmd", "unknown-type", "x", "job-unknown", 0, 1}));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("cmd"); return s && s->done == 1 && s->dead == 3; }, 30s));

  EXPECT_EQ(read_file(out / "job-echo.payload"), "hello\nworld");
  const std::string env = read_file(out / "job-echo.env");
  EXPECT_NE(env.find("DUEQ_JOB_ID=job-echo"), std::string::npos) << env;
  EXPECT_NE(env.find("DUEQ_JOB_TYPE=echo"), std::string::npos);
  EXPECT_NE(env.find("DUEQ_QUEUE=cmd"), std::string::npos);
  EXPECT_NE(env.find("DUEQ_ATTEMPT=1"), std::string::npos);
  EXPECT_NE(env.find("DUEQ_DUE_AT_MS="), std::string::npos);

  auto fail = client.job("job-fail");
  ASSERT_TRUE(fail && *fail);
  EXPECT_EQ((**fail)["s"], "dead");
  EXPECT_NE((**fail)["e"].find("exit code 7"), std::string::npos) << (**fail)["e"];
  EXPECT_NE((**fail)["e"].find("something broke"), std::string::npos);
  EXPECT_EQ((**fail)["p"], "x");  // the dead letter keeps its payload

  auto slow = client.job("job-slow");
  ASSERT_TRUE(slow && *slow);
  EXPECT_NE((**slow)["e"].find("timed out"), std::string::npos) << (**slow)["e"];

  auto unknown = client.job("job-unknown");
  ASSERT_TRUE(unknown && *unknown);
  EXPECT_NE((**unknown)["e"].find("no handler for job type 'unknown-type'"), std::string::npos);
}

TEST(EndToEnd, JobsOfAKilledWorkerAreRedeliveredToAnother) {
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  const size_t victim = cluster.start_example_worker("work", 20, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 20; ++i) jobs.push_back({"work", "sleep", "3000", "sleepy-" + std::to_string(i), 0, 0});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  ASSERT_TRUE(eventually([&] { return read_records(record).size() == 20; }, 20s));

  cluster.start_example_worker("work", 20, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(2));
  const int64_t killed_us = wall_us();
  cluster.worker(victim).signal(SIGKILL);

  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("work"); return s && s->done == 20; }, 30s));
  std::unordered_map<std::string, int> second_starts;
  std::vector<double> delays_s;
  for (const auto& r : read_records(record))
    if (r.attempt == 2) {
      ++second_starts[r.id];
      delays_s.push_back(static_cast<double>(r.start_us - killed_us) / 1e6);
    }
  EXPECT_EQ(second_starts.size(), 20u) << "every job of the killed worker ran again";
  std::printf("[ figures  ] re-delivery after SIGKILL: p50 %.2f s, max %.2f s\n", percentile(delays_s, 50),
              percentile(delays_s, 100));
}

TEST(EndToEnd, BrokerAndWorkersStopCleanlyOnSigterm) {
  Cluster cluster;
  const size_t w = cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "q",
                                         "--exec", "*=true"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  cluster.worker(w).signal(SIGTERM);
  EXPECT_EQ(cluster.worker(w).wait(10s), 0);
  cluster.broker().signal(SIGTERM);
  EXPECT_EQ(cluster.broker().wait(10s), 0);
}

TEST(EndToEnd, BrokerRefusesToStartOnRedisWithoutPersistence) {
  RedisServer redis({"--appendonly", "no"});
  const auto dir = make_temp_dir("unsafe");
  Process broker({bin("dueq-broker"), "--redis", redis.url(), "--listen", "tcp://127.0.0.1:" + std::to_string(free_port())},
                 (dir / "broker.log").string());
  EXPECT_EQ(broker.wait(10s), 1);
  EXPECT_NE(read_file(dir / "broker.log").find("appendonly yes"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(EndToEnd, MalformedFramesAreAnsweredWithAnErrorAndChangeNothing) {
  Cluster cluster;
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(cluster.endpoint());
  const std::vector<std::string> hostile = {"", "\xc1", "garbage", std::string(100, '\x91'),
                                            proto::encode(proto::Pong{"not for the broker"})};
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
  }
  EXPECT_TRUE(cluster.broker().running());
  EXPECT_EQ(cluster.redis().cli("DBSIZE"), "0");
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
