// End-to-end rules with real processes (redis-server, dueq-broker, workers):
// a job's life, stopping, and what the broker asks of Redis.
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

// Rule: a worker logs each job's start and end at info (type, attempt, time
// taken, outcome with the reason of a failure); --quiet-jobs quiets both.
TEST(EndToEnd, AWorkerLogsEachJobsStartAndEndUnlessQuiet) {
  Cluster cluster;
  const size_t loud = cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "loud", "--exec",
                                            "ok=true", "--exec", "bad=echo 'disk on fire' >&2; exit 3"});
  const size_t quiet = cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "quiet",
                                             "--exec", "*=true", "--quiet-jobs"});
  ASSERT_TRUE(cluster.wait_for_workers(2));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"loud", "ok", "", "job-ok", 0, 0}));
  ASSERT_TRUE(client.enqueue({"loud", "bad", "", "job-bad", 0, 1}));
  ASSERT_TRUE(client.enqueue({"quiet", "ok", "", "job-quiet", 0, 0}));
  ASSERT_TRUE(eventually([&] {
    auto l = cluster.stats("loud");
    auto q = cluster.stats("quiet");
    return l && q && l->done == 1 && l->dead == 1 && q->done == 1;
  }, 20s));
  const auto log_of = [&](size_t w) { return read_file(cluster.dir() / ("worker" + std::to_string(w) + ".log")); };
  ASSERT_TRUE(eventually([&] { return log_of(loud).find("job job-bad failed") != std::string::npos; }, 10s)) << log_of(loud);
  const std::string said = log_of(loud);
  EXPECT_NE(said.find("job job-ok started: queue loud, type ok, attempt 1 of "), std::string::npos) << said;
  EXPECT_NE(said.find("job job-ok done in "), std::string::npos) << said;
  EXPECT_NE(said.find("job job-bad failed"), std::string::npos) << said;
  EXPECT_NE(said.find("disk on fire"), std::string::npos) << said;
  EXPECT_EQ(log_of(quiet).find("job-quiet"), std::string::npos) << log_of(quiet);
  EXPECT_NE(log_of(quiet).find("registered with broker"), std::string::npos) << "its other info lines stay";
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
  // An ordered queue: its jobs of one key wait for their turn (lib/keys.lua).
  const auto config = write_config(dir, "[queues.acl-keys]\nordered = true\n");
  auto start_broker = [&](const std::string& log) {
    return std::make_unique<Process>(
        std::vector<std::string>{bin("dueq-broker"), "--redis", url, "--listen", endpoint, "--config", config.string()},
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
  for (int i = 0; i < 6; ++i) jobs.push_back({.queue = "acl-keys", .type = "noop", .id = "keyed-" + std::to_string(i), .key = "k"});
  jobs.push_back({"acl", "noop", "never", "tocancel", wall_ms() + 3'600'000, 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  // A flow and a batch (docs/flows.md): their scripts' own commands too.
  ASSERT_EQ(client.enqueue_flow("acl", FlowJob{{.queue = "acl", .type = "noop", .id = "acl-parent"}, ChildFailure::fail_parent,
                                               {FlowJob{{.queue = "acl", .type = "noop", .id = "acl-child"}}}})->status,
            GroupResult::Status::accepted);
  ASSERT_EQ(client.open_batch("acl", "acl-batch", {.on_complete = JobSpec{.queue = "acl", .type = "noop", .id = "acl-callback"}},
                              {JobSpec{.queue = "acl", .type = "noop", .id = "acl-member"}}, true)->status,
            GroupResult::Status::accepted);
  Process worker({bin("dueq-example-worker"), "--broker", endpoint, "--queue", "acl", "--queue", "acl-keys", "--concurrency", "4"},
                 (dir / "worker.log").string());
  auto queue_stats = [&](const std::string& name) -> std::optional<QueueStats> {
    auto s = client.stats();
    if (!s) return std::nullopt;
    for (const auto& q : *s)
      if (q.queue == name) return q;
    return std::nullopt;
  };
  ASSERT_TRUE(eventually([&] { auto q = queue_stats("acl"); return q && q->done == 44 && q->dead == 1; }, 20s))
      << read_file(dir / "broker.log");
  ASSERT_TRUE(eventually([&] { auto q = queue_stats("acl-keys"); return q && q->done == 6; }, 20s)) << read_file(dir / "broker.log");
  auto cancelled = run_dueq(endpoint, "cancel tocancel");
  EXPECT_EQ(cancelled.code, 0) << cancelled.out;
  auto replayed = run_dueq(endpoint, "dead replay --queue acl --all");
  EXPECT_EQ(replayed.code, 0) << replayed.out;
  EXPECT_NE(replayed.out.find("1 replayed"), std::string::npos) << replayed.out;
  broker->signal(SIGTERM);
  EXPECT_EQ(broker->wait(10s), 0);
  broker = start_broker("broker2.log");
  ASSERT_TRUE(eventually([&] { auto q = queue_stats("acl"); return q && q->dead == 1 && q->waiting == 0 && q->in_flight == 0; }, 20s));
  auto audit = run_dueq(endpoint, "audit");
  EXPECT_EQ(audit.code, 0) << audit.out;
  EXPECT_NE(audit.out.find("audit: clean"), std::string::npos) << audit.out;
  // Browsing, bulk actions and deleting a queue use commands of their own.
  for (const char* args : {"list acl --state done --limit 5", "list acl --state done --limit 5 --after 1:now-1",
                           "list acl --state scheduled", "bulk run cancel acl --state scheduled --dry-run",
                           "bulk run purge acl --state dead --id-prefix nothing-matches", "bulk status", "key list acl-keys",
                           "key limit acl-keys k 2", "key list acl-keys --limits", "key limit acl-keys k clear",
                           "flow children acl acl-parent", "batch status acl acl-batch"}) {
    const auto run = run_dueq(endpoint, args);
    EXPECT_EQ(run.code, 0) << args << ": " << run.out;
  }
  ASSERT_TRUE(client.enqueue({"acl-empty", "noop", "", "gone", wall_ms() + 3'600'000, 3}));
  const auto by_type = run_dueq(endpoint, "search acl-empty --type noop --json");  // the type index
  EXPECT_NE(by_type.out.find("\"gone\""), std::string::npos) << by_type.out;
  EXPECT_EQ(run_dueq(endpoint, "cancel --queue acl-empty gone").code, 0);
  EXPECT_EQ(run_dueq(endpoint, "queue delete acl-empty").code, 0);
  EXPECT_EQ(redis.cli("ACL LOG"), "") << "commands the broker's user was refused";
  EXPECT_NE(redis.cli("--user dueq --pass acl-t3st --no-auth-warning FLUSHALL").find("NOPERM"), std::string::npos);
  EXPECT_NE(redis.cli("--user dueq --pass acl-t3st --no-auth-warning SET other:key 1").find("NOPERM"), std::string::npos);
  worker.signal(SIGTERM);
  (void)worker.wait(10s);
  broker->signal(SIGTERM);
  (void)broker->wait(10s);
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
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

// Redis that refuses every write (min-replicas-to-write with no replica: a
// script's first write, whatever it is, is answered NOREPLICAS; an OOM
// refuses only a first write that may grow memory, and an ack's first write
// removes). An enqueue is answered `unavailable`: the CLI exits 75 and
// prints the id it made, so that a retry cannot make a second job. A
// result Redis refuses is kept and tried again with a backoff, not every
// turn, and the refusals are logged, not each one.
TEST(EndToEnd, WritesRedisRefusesAreAnsweredUnavailableAndRetriedWithBackoff) {
  Cluster cluster;
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "m", "--exec", "t=sleep 1"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"m", "t", "", "running", 0, 3}));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("m"); return s && s->in_flight == 1; }, 10s));
  ASSERT_EQ(cluster.redis().cli("CONFIG SET min-replicas-to-write 1"), "OK");
  const auto refusing_since = std::chrono::steady_clock::now();

  auto refused = run_dueq(cluster.endpoint(), "enqueue --queue m --type t", /*with_stderr=*/false);
  EXPECT_EQ(refused.code, 75) << refused.out;
  ASSERT_EQ(refused.out.size(), 27u) << "the generated id, on stdout: " << refused.out;
  const std::string id = refused.out.substr(0, 26);
  EXPECT_NE(run_dueq(cluster.endpoint(), "enqueue --queue m --type t").out.find("Redis refused the write"),
            std::string::npos);

  // The job finishes and its ack is refused; then, over 3 s, it is tried
  // again at the backoff's pace, not every turn, and kept.
  ASSERT_TRUE(eventually([&] { return cluster.log_count("Redis refused ack on 'm'") == 1; }, 20s))
      << "the ack was never refused";
  const int64_t first = rejected_script_calls(cluster);
  EXPECT_TRUE(eventually([&] { return rejected_script_calls(cluster) > first; }, 15s))
      << "the writes were tried again (the backoff is at most 5 s)";
  const int64_t before = rejected_script_calls(cluster);
  std::this_thread::sleep_for(3s);  // the span the retries are counted over
  EXPECT_LT(rejected_script_calls(cluster) - before, 100) << "refused writes retried in a hot loop";
  const auto refusing_for = std::chrono::steady_clock::now() - refusing_since;
  EXPECT_LE(cluster.log_count("Redis refused"), 1u + static_cast<size_t>(refusing_for / 10s)) << "one line per 10 s";
  EXPECT_EQ(cluster.log_count("enqueue into 'm' failed"), 1u);
  auto held = cluster.stats("m");
  ASSERT_TRUE(held);
  EXPECT_EQ(held->done, 0) << "no ack was written while Redis refused writes";

  ASSERT_EQ(cluster.redis().cli("CONFIG SET min-replicas-to-write 0"), "OK");
  auto again = run_dueq(cluster.endpoint(), "enqueue --queue m --type t --delay 1h --id " + id, false);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(eventually([&] { auto s = cluster.stats("m"); return s && s->done == 1; }, 15s));
  auto s = cluster.stats("m");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->accepted, 2) << "the retry with the printed id made no second job";
}

// The broker pins the encodings of a queue's jobs, tokens and leased keys
// (broker/store/keys.hpp) when the queue is first enqueued into, and puts back
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
