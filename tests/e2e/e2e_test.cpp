// End-to-end rules with real processes: redis-server, dueq-broker, workers.
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

#include "broker/dispatcher.hpp"
#include "broker/registry.hpp"
#include "broker/script_registry.hpp"
#include "common/clock.hpp"
#include "common/protocol.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/hit_and_run.hpp"
#include "tests/support/raw_peer.hpp"

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
  // Early is judged against the due time the producer asked for, not the one
  // the broker stored.
  std::unordered_map<std::string, int64_t> asked_due_ms;
  const int64_t enqueue_start = wall_us();
  for (int batch = 0; batch < kJobs / 1000; ++batch) {
    std::vector<JobSpec> jobs;
    for (int i = batch * 1000; i < (batch + 1) * 1000; ++i)
      jobs.push_back(JobSpec{"timers", "noop", "", "", base + (static_cast<int64_t>(i) * 5000) / kJobs, 0});
    auto results = client.enqueue_batch(jobs);
    ASSERT_TRUE(results) << results.error().message;
    ASSERT_EQ(results->size(), jobs.size());
    for (size_t i = 0; i < results->size(); ++i) {
      const auto& r = (*results)[i];
      ASSERT_EQ(r.status, EnqueueResult::Status::accepted) << r.reason;
      ids.insert(r.id);
      asked_due_ms[r.id] = jobs[i].due_ms;
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
    ASSERT_TRUE(asked_due_ms.contains(s.id)) << s.id;
    const double late = static_cast<double>(s.start_us - asked_due_ms[s.id] * 1000) / 1000.0;
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
  // The broker never saw those first runs start (the first delivery of a
  // job is not announced), so the re-delivery uses no attempt.
  const auto records = read_records(record);
  ASSERT_FALSE(records.empty());
  const int victim_pid = records.front().pid;
  std::unordered_map<std::string, int> second_starts;
  std::vector<double> delays_s;
  for (const auto& r : records)
    if (r.pid != victim_pid) {
      ++second_starts[r.id];
      EXPECT_EQ(r.attempt, 1) << r.id;
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
  // The broker tells a drained worker from a lost one.
  EXPECT_TRUE(eventually([&] { return cluster.log_count("drained and left") == 1; }, 10s));
  EXPECT_EQ(cluster.log_count("stopped heartbeating"), 0u);
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

// The encoding pins are sized from the Redis in use: with listpack value
// limits above deploy/redis.conf's, a queue's hot keys still leave listpack
// encoding; limits no pin can pass refuse the start, naming the setting.
TEST(EndToEnd, EncodingPinsAreLongerThanTheListpackLimitsOfTheRedisInUse) {
  Cluster cluster({}, {"--hash-max-listpack-value", "3000", "--zset-max-listpack-value", "5000"});
  Client client(cluster.endpoint());
  auto accepted = client.enqueue(JobSpec{"pinned", "noop", "", "", wall_ms() + 60'000, 0});
  ASSERT_TRUE(accepted) << accepted.error().message;
  EXPECT_EQ(cluster.redis().cli("OBJECT ENCODING 'dueq:{pinned}:jobs'"), "hashtable");
  EXPECT_EQ(cluster.redis().cli("OBJECT ENCODING 'dueq:{pinned}:tokens'"), "hashtable");
  EXPECT_EQ(cluster.redis().cli("OBJECT ENCODING 'dueq:{pinned}:leased'"), "skiplist");

  RedisServer too_high({"--zset-max-listpack-value", "70000"});
  const auto dir = make_temp_dir("pinlimit");
  Process broker({bin("dueq-broker"), "--redis", too_high.url(), "--listen", "tcp://127.0.0.1:" + std::to_string(free_port())},
                 (dir / "broker.log").string());
  EXPECT_EQ(broker.wait(10s), 1);
  EXPECT_NE(read_file(dir / "broker.log").find("zset-max-listpack-value 70000"), std::string::npos)
      << read_file(dir / "broker.log");
  std::filesystem::remove_all(dir);
}

// SIGTERM works at any moment, also while the broker waits for a Redis that
// is not there.
TEST(EndToEnd, BrokerWaitingForRedisStopsOnSigterm) {
  const auto dir = make_temp_dir("noredis");
  Process broker({bin("dueq-broker"), "--redis", "redis://127.0.0.1:" + std::to_string(free_port()), "--listen",
                  "tcp://127.0.0.1:" + std::to_string(free_port())},
                 (dir / "broker.log").string());
  ASSERT_TRUE(eventually([&] { return read_file(dir / "broker.log").find("waiting for Redis") != std::string::npos; }, 10s));
  broker.signal(SIGTERM);
  EXPECT_EQ(broker.wait(5s), 0);
  std::filesystem::remove_all(dir);
}

// Credentials Redis refuses end the start with a clear error (waiting would
// not fix them), and no password reaches a log line.
TEST(EndToEnd, RedisCredentialsAreUsedAndNeverLogged) {
  RedisServer redis;
  ASSERT_EQ(redis.cli("ACL SETUSER dueq on '>right-s3cret' '~*' '&*' '+@all'"), "OK");
  const auto dir = make_temp_dir("auth");
  const std::string host = "127.0.0.1:" + std::to_string(redis.port());
  auto start = [&](const std::string& url, const std::string& log) {
    return std::make_unique<Process>(std::vector<std::string>{bin("dueq-broker"), "--redis", url, "--listen",
                                                              "tcp://127.0.0.1:" + std::to_string(free_port())},
                                     (dir / log).string());
  };
  auto wrong = start("redis://dueq:wrong-s3cret@" + host, "wrong.log");
  EXPECT_EQ(wrong->wait(10s), 1);
  const std::string wrong_log = read_file(dir / "wrong.log");
  EXPECT_NE(wrong_log.find("AUTH failed"), std::string::npos) << wrong_log;
  auto malformed = start("redis://dueq:wrong-s3cret@" + host + "/not-a-db", "malformed.log");
  EXPECT_EQ(malformed->wait(10s), 1);
  const std::string malformed_log = read_file(dir / "malformed.log");
  EXPECT_NE(malformed_log.find("redis://dueq:***@"), std::string::npos) << malformed_log;

  auto right = start("redis://dueq:right-s3cret@" + host, "right.log");
  EXPECT_TRUE(eventually([&] { return read_file(dir / "right.log").find("listening on") != std::string::npos; }, 10s));
  right->signal(SIGTERM);
  EXPECT_EQ(right->wait(10s), 0);

  // A Redis that wants a password from a broker that has none.
  ASSERT_EQ(redis.cli("ACL SETUSER default on '>default-s3cret'"), "OK");
  auto none = start(redis.url(), "none.log");
  EXPECT_EQ(none->wait(10s), 1);
  EXPECT_NE(read_file(dir / "none.log").find("Redis needs a password"), std::string::npos) << read_file(dir / "none.log");
  (void)redis.cli("-a default-s3cret --no-auth-warning ACL SETUSER default nopass");

  for (const auto* log : {"wrong.log", "malformed.log", "right.log", "none.log"})
    EXPECT_EQ(read_file(dir / log).find("s3cret"), std::string::npos) << log << ": " << read_file(dir / log);
  std::filesystem::remove_all(dir);
}

namespace {


// One queue's counters read over `client`'s own connection (a new one may
// be refused or slow in these tests); nullopt if the read failed.
std::optional<QueueStats> stats_via(Client& client, const std::string& queue) {
  auto all = client.stats();
  if (!all) return std::nullopt;
  for (const auto& q : *all)
    if (q.queue == queue) return q;
  return std::nullopt;
}

// A memory figure of a process from /proc/PID/status, in kB ("VmRSS:" now,
// "VmHWM:" at its peak); -1 if absent.
int64_t memory_kb(pid_t pid, const char* field) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find(field);
  return at == std::string::npos ? -1 : std::stoll(status.substr(at + std::strlen(field)));
}

size_t lines_in(const std::filesystem::path& file) {
  const std::string text = read_file(file);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

// Only the worker a delivery was given to can report it, hand it back or
// hold it. A squatter that learnt the token (here: read from Redis) reports
// it done, hands it back and lists it in its heartbeats: the job keeps
// running where it was, and when its worker dies it is delivered again at
// once instead of being held by the squatter's heartbeats.
// deploy/users.acl gives the broker's Redis user only dueq's keys and the
// commands dueq runs (scripts' own calls included). A whole run as that user
// - immediate, delayed and failing jobs, a worker, a cancel, a dead-letter
// replay, a broker restart, an audit - is refused nothing: Redis's ACL LOG
// stays empty. A command outside the grant is refused.
TEST(EndToEnd, TheBrokersUserInDeployUsersAclIsRefusedNothingInAWholeRun) {
  const auto dir = make_temp_dir("acl");
  std::string acl = read_file(std::filesystem::path(DUEQ_SOURCE_DIR) / "deploy" / "users.acl");
  auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = acl.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    acl.replace(at, from.size(), to);
  };
  replace(">change-me", ">acl-t3st");
  replace("user default off", "user default on nopass ~* &* +@all");  // the test's own redis-cli
  std::ofstream(dir / "users.acl") << acl;
  RedisServer redis({"--aclfile", (dir / "users.acl").string()});
  const std::string url = "redis://dueq:acl-t3st@127.0.0.1:" + std::to_string(redis.port());
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto start_broker = [&](const std::string& log) {
    return std::make_unique<Process>(std::vector<std::string>{bin("dueq-broker"), "--redis", url, "--listen", endpoint},
                                     (dir / log).string());
  };
  auto broker = start_broker("broker.log");
  Client client(endpoint, ClientOptions{.timeout_ms = 1'000, .attempts = 10});
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 20; ++i) {
    jobs.push_back({"acl", "noop", "now", "now-" + std::to_string(i), 0, 3});
    jobs.push_back({"acl", "noop", "later", "later-" + std::to_string(i), wall_ms() + 1'000, 3});
  }
  jobs.push_back({"acl", "fail", "x", "willfail", 0, 1});
  jobs.push_back({"acl", "noop", "never", "tocancel", wall_ms() + 3'600'000, 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  Process worker({bin("dueq-example-worker"), "--broker", endpoint, "--queue", "acl", "--concurrency", "4"},
                 (dir / "worker.log").string());
  ASSERT_TRUE(eventually([&] { auto s = client.stats(); return s && !s->empty() && (*s)[0].done == 40 && (*s)[0].dead == 1; }, 20s))
      << read_file(dir / "broker.log");
  auto cancelled = run_dueq(endpoint, "cancel tocancel");
  EXPECT_EQ(cancelled.code, 0) << cancelled.out;
  auto replayed = run_dueq(endpoint, "dead replay --queue acl --all");
  EXPECT_EQ(replayed.code, 0) << replayed.out;
  EXPECT_NE(replayed.out.find("1 replayed"), std::string::npos) << replayed.out;
  broker->signal(SIGTERM);
  EXPECT_EQ(broker->wait(10s), 0);
  broker = start_broker("broker2.log");
  ASSERT_TRUE(eventually([&] { auto s = client.stats(); return s && !s->empty() && (*s)[0].dead == 1 && (*s)[0].waiting == 0 && (*s)[0].in_flight == 0; }, 20s));
  auto audit = run_dueq(endpoint, "audit");
  EXPECT_EQ(audit.code, 0) << audit.out;
  EXPECT_NE(audit.out.find("audit: clean"), std::string::npos) << audit.out;
  EXPECT_EQ(redis.cli("ACL LOG"), "") << "commands the broker's user was refused";
  EXPECT_NE(redis.cli("--user dueq --pass acl-t3st --no-auth-warning FLUSHALL").find("NOPERM"), std::string::npos);
  EXPECT_NE(redis.cli("--user dueq --pass acl-t3st --no-auth-warning SET other:key 1").find("NOPERM"), std::string::npos);
  worker.signal(SIGTERM);
  (void)worker.wait(10s);
  broker->signal(SIGTERM);
  (void)broker->wait(10s);
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

TEST(EndToEnd, OnlyTheHolderOfADeliveryCanReportHandBackOrHoldIt) {
  Cluster cluster;
  const auto runs = cluster.dir() / "runs.txt";
  const size_t holder = cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "h",
                                              // The line is the command's pid: SIGKILL of its worker leaves it running.
                                              "--exec", "slow=echo $$ >> " + runs.string() + "; exec sleep 60",
                                              "--timeout", "120s"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"h", "slow", "", "victim", 0, 3}));
  ASSERT_TRUE(eventually([&] { return lines_in(runs) == 1; }, 10s));
  const std::string token_text = cluster.redis().cli("HGET 'dueq:{h}:tokens' victim");
  ASSERT_FALSE(token_text.empty());
  const proto::JobRef victim{"h", "victim", std::stoull(token_text, nullptr, 16)};

  RawPeer squatter(cluster.endpoint(), "squatter");
  // Before its HELLO its RESULTS are not even looked at.
  squatter.send(proto::Results{{{"h", "victim", victim.token, 0, ""}}});
  auto answer = squatter.receive();
  ASSERT_TRUE(answer && std::holds_alternative<proto::ErrorFrame>(*answer));
  EXPECT_EQ(std::get<proto::ErrorFrame>(*answer).code, "unknown_worker");

  squatter.send(proto::Hello{"squatter", {"elsewhere"}, 1, {victim}, "host", 1});
  answer = squatter.receive();
  ASSERT_TRUE(answer && std::holds_alternative<proto::Welcome>(*answer));
  squatter.send(proto::Results{{{"h", "victim", victim.token, 0, ""}}});
  answer = squatter.receive();
  ASSERT_TRUE(answer && std::holds_alternative<proto::Confirm>(*answer)) << "a stale report is confirmed, not applied";
  // Reports naming queues that do not exist create nothing in Redis.
  const std::string keys_before = cluster.redis().cli("DBSIZE");
  proto::Results unknown;
  for (int i = 0; i < 100; ++i) unknown.items.push_back({"nowhere-" + std::to_string(i), "j", 5, 0, ""});
  squatter.send(unknown);
  answer = squatter.receive();
  ASSERT_TRUE(answer && std::holds_alternative<proto::Confirm>(*answer));
  squatter.send(proto::Heartbeat{{{"nowhere-x", "j", 5}}, 1, false});
  answer = squatter.receive();
  ASSERT_TRUE(answer && std::holds_alternative<proto::Pong>(*answer));
  EXPECT_EQ(cluster.redis().cli("DBSIZE"), keys_before) << "reports naming unknown queues created keys";
  squatter.send(proto::Bye{{victim}});
  // Fences instead of a sleep: the PONG to the next frame says the BYE was
  // handled; an enqueue answered after it says a round went through Redis
  // since, which would have carried a requeue.
  squatter.send(proto::Heartbeat{{}, 1, false});
  answer = squatter.receive();
  ASSERT_TRUE(answer && std::holds_alternative<proto::Pong>(*answer));
  ASSERT_TRUE(client.enqueue({"h-fence", "t", "", "fence", Client::in_ms(3'600'000), 3}));
  auto s = cluster.stats("h");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->done, 0);
  EXPECT_EQ(s->in_flight, 1);
  EXPECT_EQ(lines_in(runs), 1u) << "a hand-back by another peer re-delivered a running job";

  // Its worker dies; the squatter keeps listing the job as held.
  cluster.worker(holder).signal(SIGKILL);
  cluster.worker(holder).wait();
  ::kill(static_cast<pid_t>(std::stol(read_file(runs))), SIGKILL);  // its orphaned command
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "h", "--exec",
                        "slow=echo run >> " + runs.string()});
  const bool done = eventually([&] {
    squatter.send(proto::Heartbeat{{victim}, 1, false});
    while (squatter.receive(0ms)) {
    }
    auto st = cluster.stats("h");
    return st && st->done == 1;
  }, 30s);
  EXPECT_TRUE(done) << "the squatter's heartbeats kept the job from being delivered again";
  EXPECT_EQ(lines_in(runs), 2u);
  // Logged, at most once per peer per 10 s.
  EXPECT_EQ(cluster.log_count("peer squatter:"), 1u);
}

// One record that does not decode goes to the dead letters as an
// "unreadable record"; the rest of its lease batch is delivered.
// Three ways a delivery never reaches a worker, each with jobs of
// max_attempts 1 that must still run, once each: a worker that says HELLO and
// falls silent (its TASKS sit unread until it is declared dead), a worker that
// says HELLO and disconnects (ROUTER_MANDATORY: the TASKS frame is refused and
// its jobs handed back), and a broker that dies between lease and dispatch
// (the leases are taken here, as that broker would have, and then expire).
TEST(EndToEnd, DeliveriesThatNeverReachedAWorkerUseNoAttempt) {
  Cluster cluster;
  Client client(cluster.endpoint());
  auto batch = [](const std::string& prefix) {
    std::vector<JobSpec> jobs;
    for (int i = 0; i < 3; ++i) jobs.push_back({"once", "noop", "", prefix + std::to_string(i), 0, 1});
    return jobs;
  };

  RawPeer silent(cluster.endpoint(), "silent");
  silent.send(proto::Hello{"silent", {"once"}, 3, {}, "host", 1});
  auto welcome = silent.receive();
  ASSERT_TRUE(welcome && std::holds_alternative<proto::Welcome>(*welcome));
  ASSERT_TRUE(client.enqueue_batch(batch("silent-")));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("once"); return s && s->in_flight == 3; }, 10s));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("once"); return s && s->waiting == 3; }, 10s))
      << "the silent worker's jobs did not come back";

  const std::set<int> ports_before = cluster.open_connection_ports();
  std::set<int> ports_of_gone;
  {
    RawPeer gone(cluster.endpoint(), "gone");
    gone.send(proto::Hello{"gone", {"once"}, 10, {}, "host", 1});
    auto w = gone.receive();
    ASSERT_TRUE(w && std::holds_alternative<proto::Welcome>(*w));
    for (int port : cluster.open_connection_ports())
      if (!ports_before.contains(port)) ports_of_gone.insert(port);
  }
  ASSERT_FALSE(ports_of_gone.empty());
  // The broker has closed its end of the connection `gone` closed, so its
  // socket knows the peer is gone when the next TASKS frame is routed.
  ASSERT_TRUE(eventually([&] {
    for (int port : cluster.open_connection_ports())
      if (ports_of_gone.contains(port)) return false;
    return true;
  }, 10s));
  ASSERT_TRUE(client.enqueue_batch(batch("gone-")));
  ASSERT_TRUE(eventually([&] { return cluster.log_count("cannot take a TASKS frame") >= 1; }, 10s));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("once"); return s && s->waiting == 6; }, 10s));

  ASSERT_TRUE(client.enqueue_batch(batch("crash-")));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("once"); return s && s->waiting == 9; }, 10s));
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait();
  {
    broker::ScriptRegistry redis(*parse_redis_url(cluster.redis().url()));
    // Writes as the killed broker's epoch would (lua/lib/fence.lua).
    redis.set_epoch(std::stoull(cluster.redis().cli("GET dueq:{once}:epoch")));
    ASSERT_TRUE(redis.connect());
    auto leased = redis.call(broker::calls::lease("once", wall_ms() + 500, 9));
    ASSERT_TRUE(leased);
    auto batch_taken = broker::calls::parse_lease(leased->get());
    ASSERT_TRUE(batch_taken);
    ASSERT_EQ(batch_taken->jobs.size(), 9u);
  }
  cluster.start_broker();

  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker("once", 4, record.string());
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("once"); return s && s->done == 9; }, 30s))
      << run_dueq(cluster.endpoint(), "job silent-0").out << run_dueq(cluster.endpoint(), "stats").out;
  std::map<std::string, int> runs;
  for (const auto& r : read_records(record)) {
    ++runs[r.id];
    EXPECT_EQ(r.attempt, 1u) << r.id;
  }
  EXPECT_EQ(runs.size(), 9u);
  for (const auto& [id, n] : runs) EXPECT_EQ(n, 1) << id;
  auto shown = run_dueq(cluster.endpoint(), "dead list once");
  EXPECT_EQ(cluster.stats("once")->dead, 0) << shown.out;
}

// Rule: only heartbeats and results show a registered worker alive. A peer
// that says HELLO again and again, and nothing else, is declared dead after
// worker_timeout_ms; the jobs it was given go back without an attempt
// charged, and under that routing id it is sent nothing more until it
// heartbeats.
TEST(EndToEnd, APeerThatOnlySaysHelloIsDeclaredDeadAndThenSentNothing) {
  Cluster cluster;
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 40; ++i) jobs.push_back({"hello-only", "noop", "", fmt::format("h-{}", i), 0, 1});
  RawPeer squatter(cluster.endpoint(), "squatter");
  squatter.send(proto::Hello{"squatter", {"hello-only"}, 10'000, {}, "host", 1});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  size_t delivered = 0;
  const auto until = std::chrono::steady_clock::now() + 6s;
  while (std::chrono::steady_clock::now() < until) {
    squatter.send(proto::Hello{"squatter", {"hello-only"}, 10'000, {}, "host", 1});
    const auto turn_end = std::chrono::steady_clock::now() + 300ms;
    while (auto frame = squatter.receive(std::chrono::duration_cast<std::chrono::milliseconds>(
               std::max(turn_end - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(1ms))))) {
      if (auto* tasks = std::get_if<proto::Tasks>(&*frame)) delivered += tasks->items.size();
      if (std::chrono::steady_clock::now() >= turn_end) break;
    }
  }
  EXPECT_EQ(delivered, static_cast<size_t>(broker::WorkerRegistry::kUnconfirmedCredit)) << "one probation credit, then nothing";
  auto s = cluster.stats("hello-only");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->in_flight, 0) << "the squatter still holds jobs 6 s after its last heartbeat-free HELLO began";
  EXPECT_EQ(s->waiting, 40);

  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker("hello-only", 8, record.string());
  ASSERT_TRUE(eventually([&] { auto st = cluster.stats("hello-only"); return st && st->done == 40; }, 30s));
  for (const auto& r : read_records(record)) EXPECT_EQ(r.attempt, 1u) << r.id;
  EXPECT_EQ(cluster.stats("hello-only")->dead, 0);
}

// Rule: a lease is renewed for at most the queue's max_run_time after its
// delivery. A peer that heartbeats the jobs it holds and never finishes them
// loses them (without an attempt: it was never seen to start one), and they
// run on a healthy worker.
TEST(EndToEnd, APeerThatHoldsJobsAndNeverFinishesThemLosesThemAfterMaxRunTime) {
  const auto config_dir = make_temp_dir("squat");
  std::ofstream(config_dir / "broker.toml") << "lease_ttl = \"3s\"\n[queues.squat]\nmax_run_time = \"1s\"\n";
  Cluster cluster({"--config", (config_dir / "broker.toml").string()});
  std::filesystem::remove_all(config_dir);
  Client client(cluster.endpoint());
  RawPeer squatter(cluster.endpoint(), "squatter");
  squatter.send(proto::Hello{"squatter", {"squat"}, 10, {}, "host", 1});
  auto welcome = squatter.receive();
  ASSERT_TRUE(welcome && std::holds_alternative<proto::Welcome>(*welcome));
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 10; ++i) jobs.push_back({"squat", "noop", "", fmt::format("sq-{}", i), 0, 1});
  ASSERT_TRUE(client.enqueue_batch(jobs));

  // The squatter confirms every TASKS frame and lists what it holds in a
  // heartbeat every 200 ms, and finishes nothing.
  std::vector<proto::JobRef> held;
  auto squat_for = [&](std::chrono::milliseconds turn) {
    squatter.send(proto::Heartbeat{held, 10, false});
    const auto turn_end = std::chrono::steady_clock::now() + turn;
    while (std::chrono::steady_clock::now() < turn_end) {
      auto frame = squatter.receive(std::chrono::duration_cast<std::chrono::milliseconds>(turn_end - std::chrono::steady_clock::now()) + 1ms);
      if (!frame) continue;
      if (auto* tasks = std::get_if<proto::Tasks>(&*frame)) {
        for (const auto& task : tasks->items) held.push_back({task.queue, task.id, task.token});
        squatter.send(proto::Received{tasks->seq});
      }
    }
  };
  ASSERT_TRUE(eventually([&] { squat_for(200ms); return held.size() == 10; }, 10s)) << held.size() << " delivered";

  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker("squat", 4, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(2));
  ASSERT_TRUE(eventually([&] {
    squat_for(200ms);
    auto st = cluster.stats("squat");
    return st && st->done == 10;
  }, 60s)) << "jobs a peer holds without finishing them stay with it";
  EXPECT_EQ(cluster.stats("squat")->dead, 0);
  EXPECT_GE(cluster.log_count("past its max_run_time"), 1u);
  std::map<std::string, int> runs;
  for (const auto& r : read_records(record)) ++runs[r.id];
  EXPECT_EQ(runs.size(), 10u);
}

// Rule: a worker that stops reading its socket is cut off once the TASKS it
// left unread pass max_unread_mib: it is sent nothing more and declared
// lost, its jobs go back at once (without an attempt: none was seen to
// start) and run on a healthy worker, and what the broker queued for it
// stays under that bound.
TEST(EndToEnd, AWorkerThatStopsReadingIsCutOffAtTheUnreadLimitAndItsJobsRunElsewhere) {
  const auto config_dir = make_temp_dir("unread");
  // A worker_timeout that the sanitized build's slower enqueues fit in.
  std::ofstream(config_dir / "broker.toml") << "max_unread_mib = 4\nworker_timeout = \"5s\"\n";
  Cluster cluster({"--config", (config_dir / "broker.toml").string()});
  std::filesystem::remove_all(config_dir);
  const pid_t broker = cluster.broker().pid();
  Client client(cluster.endpoint());

  // A peer that reads its WELCOME and its first TASKS frame, confirms that
  // frame, and from then on only heartbeats (its socket buffers one message
  // and a few kB of the stream).
  zmq::context_t context;
  zmq::socket_t reader(context, zmq::socket_type::dealer);
  reader.set(zmq::sockopt::routing_id, "stops-reading");
  reader.set(zmq::sockopt::linger, 0);
  reader.set(zmq::sockopt::rcvhwm, 1);
  reader.set(zmq::sockopt::rcvbuf, 4096);
  reader.connect(cluster.endpoint());
  auto send = [&](const auto& body) {
    const std::string bytes = proto::encode(body);
    reader.send(zmq::buffer(bytes), zmq::send_flags::none);
  };
  auto receive = [&]() -> std::optional<proto::Frame> {
    zmq::pollitem_t item{reader.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, 5s) != 1) return std::nullopt;
    zmq::message_t message;
    if (!reader.recv(message)) return std::nullopt;
    auto frame = proto::decode(message.to_string_view());
    return frame ? std::optional(std::move(*frame)) : std::nullopt;
  };
  send(proto::Hello{"stops-reading", {"big"}, 1000, {}, "host", 1});
  auto welcome = receive();
  ASSERT_TRUE(welcome && std::holds_alternative<proto::Welcome>(*welcome));

  const int64_t rss_before_kb = memory_kb(broker, "VmRSS:");
  constexpr int kJobs = 200;
  const std::string payload(size_t{128} * 1024, 'p');
  for (int at = 0; at < kJobs; at += 40) {
    send(proto::Heartbeat{{}, 1000, false});
    std::vector<JobSpec> batch;
    for (int i = at; i < at + 40; ++i) batch.push_back({"big", "noop", payload, fmt::format("big-{}", i), 0, 1});
    ASSERT_TRUE(client.enqueue_batch(batch));
  }
  std::optional<proto::Frame> first;
  while ((first = receive()) && !std::holds_alternative<proto::Tasks>(*first)) {}  // PONGs to its heartbeats
  ASSERT_TRUE(first) << "no TASKS frame came";
  const auto& tasks = std::get<proto::Tasks>(*first);
  std::vector<proto::JobRef> held;
  for (const auto& task : tasks.items) held.push_back({task.queue, task.id, task.token});
  send(proto::Received{tasks.seq});
  ASSERT_TRUE(eventually([&] {
    send(proto::Heartbeat{held, 1000, false});
    return cluster.log_count("stopped reading its socket") >= 1;
  }, 30s, 200ms)) << "a peer that reads nothing was never cut off";

  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker("big", 8, record.string());
  ASSERT_TRUE(eventually([&] {
    send(proto::Heartbeat{held, 1000, false});
    auto st = cluster.stats("big");
    return st && st->done == kJobs;
  }, 60s, 200ms));
  EXPECT_EQ(cluster.stats("big")->dead, 0);
  std::set<std::string> ran;
  for (const auto& r : read_records(record)) ran.insert(r.id);
  EXPECT_EQ(ran.size(), static_cast<size_t>(kJobs));
  // The peak: what was queued for the peer (4 MiB), one lease batch of these
  // payloads in the broker's hands (at most 184 x 128 KiB = 23 MiB), and
  // Redis replies and frames around it.
  const int64_t peak_kb = memory_kb(broker, "VmHWM:");
#ifdef DUEQ_SANITIZED
  constexpr int64_t kGrowthBoundKb = 600'000;  // ASan keeps up to 256 MB of freed memory, plus shadow
#else
  constexpr int64_t kGrowthBoundKb = 128'000;
#endif
  EXPECT_LT(peak_kb - rss_before_kb, kGrowthBoundKb);
  std::printf("[ figures  ] a peer that stopped reading: broker RSS %lld kB before, peak %lld kB; %zu jobs ran elsewhere\n",
              static_cast<long long>(rss_before_kb), static_cast<long long>(peak_kb), ran.size());
}

// A worker that falls silent while peers flood the broker is declared dead
// during the flood, and its jobs (leased for a minute) run elsewhere. Were
// the socket never read empty, workers would be judged up to the last
// moment since which connections x 2 x RCVHWM frames were read (ZeroMQ
// reads peers in turn and queues a bounded number per peer); the floods
// this test can make on 2 cores delay that emptiness by seconds but do not
// prevent it, so that bound is shown by construction (inbound.cpp), not here.
TEST(EndToEnd, AWorkerFallenSilentDuringAFloodIsDeclaredDeadAndItsJobsRunElsewhere) {
  // Its deliveries' leases outlast the test: only being declared dead brings them back.
  Cluster cluster({"--delivery-timeout", "60s"});
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 8; ++i) jobs.push_back({"silent", "noop", "", fmt::format("s-{}", i), 0, 3});
  RawPeer victim(cluster.endpoint(), "victim");
  victim.send(proto::Hello{"victim", {"silent"}, 8, {}, "host", 1});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  size_t held = 0;
  while (held < jobs.size()) {
    auto frame = victim.receive();
    ASSERT_TRUE(frame) << "the victim got " << held << " jobs";
    if (auto* tasks = std::get_if<proto::Tasks>(&*frame)) {
      held += tasks->items.size();
      victim.send(proto::Received{tasks->seq});
    }
  }

  // Each flood frame is cheap to send and dear to read: an ENQUEUE of 1,000
  // jobs the broker validates one by one and refuses (bad queue name), each
  // with its reason.
  proto::Enqueue refused_batch{1, {}};
  for (int i = 0; i < 1'000; ++i) refused_batch.jobs.push_back({"no such queue!", fmt::format("f-{}", i), "t", {}, 0, 1, 0, 0});
  const std::string heavy = proto::encode(refused_batch);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  std::vector<std::thread> floods;
  for (int f = 0; f < 3; ++f)
    floods.emplace_back([&, f] {
      zmq::context_t context;
      zmq::socket_t socket(context, zmq::socket_type::dealer);
      socket.set(zmq::sockopt::routing_id, fmt::format("flood-{}", f));
      socket.set(zmq::sockopt::linger, 0);
      socket.connect(cluster.endpoint());
      zmq::message_t answer;
      while (!stop) {
        if (socket.send(zmq::buffer(heavy), zmq::send_flags::dontwait)) ++sent;
        else std::this_thread::sleep_for(1ms);
        while (socket.recv(answer, zmq::recv_flags::dontwait)) {}  // answers are read: the broker keeps serving
      }
    });
  const auto flood_start = std::chrono::steady_clock::now();
  // Sanitized, with other tests beside it, the verdict has taken 22 s.
  const bool declared_dead = eventually([&] { return cluster.log_count("stopped heartbeating") >= 1; }, 45s, 100ms);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - flood_start);
  stop = true;
  for (auto& t : floods) t.join();
  EXPECT_TRUE(declared_dead) << "after " << took.count() << " ms of flood (" << sent << " frames sent)";
  EXPECT_GE(sent.load(), 1'000u) << "the flood ran";
  fprintf(stderr, "victim declared dead %lld ms into the flood; %llu flood frames sent\n",
          static_cast<long long>(took.count()), static_cast<unsigned long long>(sent.load()));

  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker("silent", 8, record.string());
  ASSERT_TRUE(eventually([&] { auto st = cluster.stats("silent"); return st && st->done == 8; }, 30s));
  EXPECT_EQ(cluster.stats("silent")->dead, 0);
}

namespace {
// Jobs Q1, Q2, Q3 wait in queue Q, Q2 spoiled in Redis: a worker started now
// runs Q1 and Q3, and Q2 ends in the dead letters for `reason`.
void expect_only_the_middle_job_dead(Cluster& cluster, const std::string& q, const std::string& reason) {
  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker(q, 4, record.string());
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats(q); return s && s->done == 2 && s->dead == 1; }, 15s))
      << run_dueq(cluster.endpoint(), "job " + q + "2").out << run_dueq(cluster.endpoint(), "stats").out;
  auto shown = run_dueq(cluster.endpoint(), "job " + q + "2");
  EXPECT_NE(shown.out.find(reason), std::string::npos) << shown.out;
  std::set<std::string> ran;
  for (const auto& r : read_records(record)) ran.insert(r.id);
  EXPECT_EQ(ran, (std::set<std::string>{q + "1", q + "3"}));
}
}  // namespace

TEST(EndToEnd, AnUnreadableRecordIsDeadLetteredAndTheRestOfItsBatchDelivered) {
  Cluster cluster;
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue_batch(
      {{"u", "noop", "p", "u1", 0, 1}, {"u", "noop", "p", "u2", 0, 1}, {"u", "noop", "p", "u3", 0, 1}}));
  ASSERT_EQ(cluster.redis().cli("HSET 'dueq:{u}:jobs' u2 not-a-record"), "0");
  expect_only_the_middle_job_dead(cluster, "u", "unreadable record");
}

// A payload changed after its enqueue (here: one byte of the stored record,
// as a disk or a faulty peer could) is not run: the worker checks the
// checksum written at enqueue and the job goes to the dead letters as
// "payload corrupted"; the jobs beside it run.
TEST(EndToEnd, APayloadChangedAfterItsEnqueueIsDeadLetteredAsCorruptedAndNotRun) {
  Cluster cluster;
  Client client(cluster.endpoint());
  // No worker yet: the jobs wait in `ready` with their records in `jobs`.
  ASSERT_TRUE(client.enqueue_batch(
      {{"c", "noop", "intact-1", "c1", 0, 3}, {"c", "noop", "tamper-me", "c2", 0, 3}, {"c", "noop", "intact-3", "c3", 0, 3}}));
  // Same length, so the record still decodes: only the checksum can tell.
  EXPECT_EQ(cluster.redis().cli("EVAL \"local r = redis.call('HGET', KEYS[1], ARGV[1]); "
                                "return redis.call('HSET', KEYS[1], ARGV[1], (string.gsub(r, 'tamper%-me', 'tampered!')))\" "
                                "1 'dueq:{c}:jobs' c2"),
            "0");
  ASSERT_NE(cluster.redis().cli("HGET 'dueq:{c}:jobs' c2").find("tampered!"), std::string::npos);
  expect_only_the_middle_job_dead(cluster, "c", "payload corrupted");
}

namespace {
// Script calls Redis refused (before running them, or at their first write).
int64_t rejected_script_calls(Cluster& cluster) {
  const std::string stats = cluster.redis().cli("INFO commandstats");
  const auto at = stats.find("cmdstat_evalsha:");
  if (at == std::string::npos) return 0;
  int64_t total = 0;
  for (const std::string field : {"rejected_calls=", "failed_calls="})
    if (const auto pos = stats.find(field, at); pos != std::string::npos) total += std::stoll(stats.substr(pos + field.size()));
  return total;
}
}  // namespace

// Redis out of memory refuses every write. An enqueue is answered
// `unavailable`: the CLI exits 75 and prints the id it made, so that a retry
// cannot make a second job. A result Redis refuses is kept and tried again
// with a backoff, not every turn, and the refusals are logged, not each one.
TEST(EndToEnd, WritesRedisRefusesAreAnsweredUnavailableAndRetriedWithBackoff) {
  Cluster cluster;
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "m", "--exec", "t=sleep 1"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"m", "t", "", "running", 0, 3}));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("m"); return s && s->in_flight == 1; }, 10s));
  ASSERT_EQ(cluster.redis().cli("CONFIG SET maxmemory 1"), "OK");

  auto refused = run_dueq(cluster.endpoint(), "enqueue --queue m --type t", /*with_stderr=*/false);
  EXPECT_EQ(refused.code, 75) << refused.out;
  ASSERT_EQ(refused.out.size(), 27u) << "the generated id, on stdout: " << refused.out;
  const std::string id = refused.out.substr(0, 26);
  EXPECT_NE(run_dueq(cluster.endpoint(), "enqueue --queue m --type t").out.find("Redis refused the write"),
            std::string::npos);

  // The job finishes; its ack is refused for 3 s.
  const int64_t before = rejected_script_calls(cluster);
  std::this_thread::sleep_for(3s);
  const int64_t during = rejected_script_calls(cluster) - before;
  EXPECT_GT(during, 0);
  EXPECT_LT(during, 100) << "refused writes retried in a hot loop";
  EXPECT_LE(cluster.log_count("ack script failed"), 1u);
  EXPECT_EQ(cluster.log_count("enqueue into 'm' failed"), 1u);

  ASSERT_EQ(cluster.redis().cli("CONFIG SET maxmemory 0"), "OK");
  auto again = run_dueq(cluster.endpoint(), "enqueue --queue m --type t --delay 1h --id " + id, false);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(eventually([&] { auto s = cluster.stats("m"); return s && s->done == 1; }, 15s));
  auto s = cluster.stats("m");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->accepted, 2) << "the retry with the printed id made no second job";
}

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
// CPU time (user + system, ms) of a process.
int64_t cpu_ms(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * 1000 / ::sysconf(_SC_CLK_TCK);
}
}  // namespace

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
  // (the link check alone would wait 60 s).
  {
    Client newcomer(cluster.endpoint(), ClientOptions{.timeout_ms = 1'000, .attempts = 1, .connect_timeout_ms = 60'000});
    const auto refused = newcomer.enqueue({"fds", "noop", "", "refused", 0, 1});
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, "unavailable") << refused.error().message;
    EXPECT_NE(refused.error().message.find("open-file limit"), std::string::npos) << refused.error().message;
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
// 12,000 hit-and-run HELLOs under distinct routing ids, each taking what the
// broker sends it and vanishing, beside a healthy worker: deliveries nobody
// was seen to start charge no attempt, so not one of 2,000 max_attempts=1
// jobs ends dead (a43b6cc: 1,916 of 2,000, per the issue's measurement).
TEST(EndToEnd, ABurstOfHitAndRunHellosSendsNoJobToTheDeadLetters) {
  Cluster cluster;
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 2000; ++i) jobs.push_back({"burst", "sleep", "5", fmt::format("job-{}", i), 0, 1});
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
      for (int i = t; i < 12'000 && std::chrono::steady_clock::now() < give_up; i += 4) {
        deliveries_taken += hit_and_run(context, cluster.endpoint(), "burst", i);
        ++hellos;
      }
    });
  for (auto& p : peers) p.join();
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("burst"); return s && s->done + s->dead == 2000; }, 120s));
  auto s = cluster.stats("burst");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->dead, 0);
  EXPECT_EQ(s->done, 2000);
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
  const int mask = std::getenv("HOSTILE") ? std::atoi(std::getenv("HOSTILE")) : 15;
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

  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 10'000, .attempts = 3});
  std::vector<double> latency_ms;
  int64_t max_rss_kb = rss_before_kb;
  // Enough one-at-a-time jobs to cross every flood many times over (the
  // floods repeat every 2 s at most; each job waits its turn behind them, so
  // 50 take about a minute in the sanitized suite); more only lengthen it.
  constexpr int kJobs = 50;
  for (int i = 0; i < kJobs; ++i) {
    const int64_t t0 = wall_us();
    auto r = client.enqueue({"good", "noop", "", fmt::format("good-{}", i), 0, 0});
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_EQ(r->status, EnqueueResult::Status::accepted) << r->reason;
    latency_ms.push_back(static_cast<double>(wall_us() - t0) / 1000.0);
    if (i % 50 == 0) max_rss_kb = std::max(max_rss_kb, memory_kb(broker, "VmRSS:"));
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
      EXPECT_NE(std::get<proto::ErrorFrame>(*frame).message.find("more than 100000 values"), std::string::npos)
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

// The broker pins the encodings of a queue's jobs, tokens and leased keys
// (broker/keys.hpp) when the queue is first enqueued into, and puts back
// missing pins (a store from before them) when it starts.
TEST(EndToEnd, TheBrokerPinsTheKeyEncodingsOfNewQueuesAndOfQueuesItFindsAtStart) {
  Cluster cluster;
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"pinned", "noop", "", "later", Client::in_ms(3'600'000), 3}));
  auto encodings = [&] {
    std::string out;
    for (const char* key : {"jobs", "tokens", "leased"})
      out += cluster.redis().cli(std::string("OBJECT ENCODING 'dueq:{pinned}:") + key + "'") + " ";
    return out;
  };
  EXPECT_EQ(encodings(), "hashtable hashtable skiplist ");
  // The job waits in its schedule partition: these keys hold only the pins.
  ASSERT_EQ(cluster.redis().cli("DEL 'dueq:{pinned}:jobs' 'dueq:{pinned}:tokens' 'dueq:{pinned}:leased'"), "3");
  cluster.broker().signal(SIGTERM);
  ASSERT_EQ(cluster.broker().wait(10s), 0);
  cluster.start_broker();
  EXPECT_EQ(encodings(), "hashtable hashtable skiplist ");
  const auto record = cluster.dir() / "runs.txt";
  cluster.start_example_worker("pinned", 2, record.string());
  ASSERT_TRUE(client.enqueue({"pinned", "noop", "", "now", 0, 3}));
  EXPECT_TRUE(eventually([&] { auto s = cluster.stats("pinned"); return s && s->done == 1 && s->in_flight == 0; }, 10s));
  auto audit = run_dueq(cluster.endpoint(), "audit");
  EXPECT_NE(audit.out.find("audit: clean"), std::string::npos) << audit.out;
}
