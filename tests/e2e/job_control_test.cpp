// Changing one waiting job by id (docs/jobs.md, "Changing a waiting job"):
// reschedule, run now and edit keep the job's id, attempts and key, are
// refused while it runs or once it finished, and an edit is refused once the
// job changed since its version was read. At the due edge, a reschedule
// racing the lease starts every job once, never before its new due time.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <array>
#include <map>
#include <set>
#include <thread>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

JobDocument document(Client& client, const std::string& id) {
  auto doc = client.job_document(id, "jc");
  EXPECT_TRUE(doc && *doc) << id;
  return doc && *doc ? **doc : JobDocument{};
}

}  // namespace

TEST(JobControl, RescheduleRunNowAndEditChangeAWaitingJobAndKeepItsIdAttemptsAndKey) {
  Cluster cluster;
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "jc", .type = "noop", .payload = "old", .id = "jc-1",
                              .due_ms = Client::in_ms(3'600'000), .key = "acct-7"}));
  const JobDocument before = document(client, "jc-1");
  ASSERT_EQ(before.version.size(), 16u) << "the document shows the record's version";

  // Bad input: a usage error, and nothing changes.
  for (const char* bad : {"job reschedule jc-1", "job reschedule jc-1 --at notatime", "job reschedule jc-1 --in soon",
                          "job reschedule jc-1 --now --in 1s", "job edit jc-1", "job edit jc-1 --payload x --version abc",
                          "job reschedule 'j c' --now", "job"}) {
    const auto run = run_dueq(cluster.endpoint(), bad, true);
    EXPECT_EQ(run.code, 2) << bad << ": " << run.out;
  }
  EXPECT_EQ(run_dueq(cluster.endpoint(), "job reschedule nobody --now", true).code, 3);
  EXPECT_EQ(document(client, "jc-1").run_at_ms, before.run_at_ms);

  // Later by two hours: still scheduled, the same job.
  const int64_t asked_ms = wall_ms();
  const auto later = run_dueq(cluster.endpoint(), "job reschedule jc-1 --in 2h", false);
  ASSERT_EQ(later.code, 0) << later.out;
  EXPECT_NE(later.out.find("job jc-1 rescheduled"), std::string::npos) << later.out;
  JobDocument moved = document(client, "jc-1");
  EXPECT_EQ(moved.state, "scheduled");
  EXPECT_GE(*moved.run_at_ms, asked_ms + 7'200'000);
  EXPECT_LT(*moved.run_at_ms, asked_ms + 7'260'000);
  EXPECT_EQ(moved.key, "acct-7");
  EXPECT_EQ(moved.due_ms, before.due_ms) << "the first due time stays in the document";
  EXPECT_EQ(moved.version, before.version) << "a reschedule does not change the record";

  // An edit naming a version that is not the job's is refused; one naming
  // it replaces the payload (any bytes) and gives a new version.
  const auto stale = run_dueq(cluster.endpoint(), "job edit jc-1 --payload new --version 0123456789abcdef", true);
  EXPECT_EQ(stale.code, 4) << stale.out;
  EXPECT_NE(stale.out.find("changed since version 0123456789abcdef"), std::string::npos) << stale.out;
  EXPECT_EQ(document(client, "jc-1").payload, "old");
  const std::string odd_bytes = std::string("\xff\x00\x01", 3) + " not utf-8";
  auto edited = client.edit_payload("jc-1", odd_bytes, before.version);
  ASSERT_TRUE(edited) << edited.error().message;
  EXPECT_NE(*edited, before.version);
  EXPECT_EQ(document(client, "jc-1").payload, odd_bytes);
  EXPECT_EQ(document(client, "jc-1").version, *edited);
  auto again = client.edit_payload("jc-1", "lost update", before.version);
  ASSERT_FALSE(again) << "the version read before the first edit is stale";
  EXPECT_EQ(again.error().code, "conflict");
  const auto edit = run_dueq(cluster.endpoint(), "job edit jc-1 --payload new --json", false);
  ASSERT_EQ(edit.code, 0) << edit.out;
  EXPECT_EQ(json::parse(edit.out)["rows"][0]["version"], document(client, "jc-1").version) << edit.out;

  // Run now: a worker starts it at once, with the edited payload, attempt 1.
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("jc", 2, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  ASSERT_TRUE(client.run_now("jc-1"));
  ASSERT_TRUE(eventually([&] { return document(client, "jc-1").state == "done"; }, 20s));
  const auto starts = read_records(record);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].payload, "new");
  EXPECT_EQ(starts[0].attempt, 1);
  EXPECT_GE(starts[0].start_us / 1000, asked_ms);

  // A finished job cannot be changed.
  const auto finished = run_dueq(cluster.endpoint(), "job reschedule jc-1 --now", true);
  EXPECT_EQ(finished.code, 4) << finished.out;
  EXPECT_NE(finished.out.find("job jc-1 is done"), std::string::npos) << finished.out;

  // Nor a running one: refused with what it is doing.
  ASSERT_TRUE(client.enqueue({.queue = "jc", .type = "sleep", .payload = "3000", .id = "jc-2"}));
  ASSERT_TRUE(eventually([&] { return document(client, "jc-2").state == "running"; }, 20s));
  auto running = client.reschedule("jc-2", Client::in_ms(60'000));
  ASSERT_FALSE(running);
  EXPECT_EQ(running.error().code, "conflict");
  EXPECT_NE(running.error().message.find("is running"), std::string::npos) << running.error().message;
  const auto edit_running = run_dueq(cluster.endpoint(), "job edit jc-2 --payload 1", true);
  EXPECT_EQ(edit_running.code, 4) << edit_running.out;
  ASSERT_TRUE(eventually([&] { return document(client, "jc-2").state == "done"; }, 20s));
  int jc2_starts = 0;
  for (const auto& r : read_records(record)) jc2_starts += r.id == "jc-2" ? 1 : 0;
  EXPECT_EQ(jc2_starts, 1) << "the refusals left the running job alone";
}

// Jobs due over one second, each rescheduled by id around its due time
// (before it, while it is leased or running, after it is done): every job
// runs exactly once, a job whose reschedule was answered never starts
// before its new due time, and none is lost (the audit is clean).
TEST(JobControl, ReschedulesRacingTheDueEdgeStartEachJobOnceAndNeverBeforeItsNewTime) {
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("jc", 8, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  // Groups of ten jobs due at once, 400 ms apart; each job of a group is
  // rescheduled 1.5 s later at its own offset from the group's due time,
  // from 100 ms before it to 150 ms after: the first land before it, the
  // last after the job ran, those between race the lease.
  constexpr std::array<int64_t, 10> kOffsetsMs{-100, -60, -30, -10, -3, 0, 3, 10, 60, 150};
  constexpr int kGroups = 20, kJobs = kGroups * static_cast<int>(kOffsetsMs.size());
  const int64_t first_due = wall_ms() + 2'000;
  const auto id_of = [](int g, size_t k) { return fmt::format("edge-{:02}-{}", g, k); };
  std::vector<JobSpec> jobs;
  for (int g = 0; g < kGroups; ++g)
    for (size_t k = 0; k < kOffsetsMs.size(); ++k)
      jobs.push_back({.queue = "jc", .type = "noop", .id = id_of(g, k), .due_ms = first_due + int64_t{g} * 400});
  ASSERT_TRUE(client.enqueue_batch(jobs));

  std::map<std::string, int64_t> moved_to;  // id -> the new due time the broker answered
  int refused = 0;
  std::string a_refusal;
  std::vector<double> answer_ms;
  for (int g = 0; g < kGroups; ++g) {
    const int64_t due = first_due + int64_t{g} * 400;
    for (size_t k = 0; k < kOffsetsMs.size(); ++k) {
      while (wall_ms() < due + kOffsetsMs[k]) std::this_thread::sleep_for(200us);
      const int64_t new_due = due + 1'500, asked = steady_us();
      auto r = client.reschedule(id_of(g, k), new_due, "jc");
      answer_ms.push_back(static_cast<double>(steady_us() - asked) / 1000.0);
      if (r) {
        moved_to[id_of(g, k)] = new_due;
      } else {
        ASSERT_EQ(r.error().code, "conflict") << id_of(g, k) << ": " << r.error().message;
        if (a_refusal.empty()) a_refusal = r.error().message;
        ++refused;
      }
    }
  }
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("jc"); return s && s->done == kJobs; }, 60s));
  std::map<std::string, int> starts;
  std::vector<double> lateness_ms;
  for (const auto& r : read_records(record)) {
    ++starts[r.id];
    if (auto it = moved_to.find(r.id); it != moved_to.end()) {
      EXPECT_GE(r.start_us / 1000, it->second) << r.id << " started before its new due time";
      lateness_ms.push_back(static_cast<double>(r.start_us) / 1000.0 - static_cast<double>(it->second));
    }
  }
  EXPECT_EQ(starts.size(), static_cast<size_t>(kJobs)) << "every job ran";
  for (const auto& [id, n] : starts) EXPECT_EQ(n, 1) << id << " started " << n << " times";
  const auto audit = run_dueq(cluster.endpoint(), "audit --queue jc", false);
  EXPECT_EQ(audit.code, 0) << audit.out;
  EXPECT_GT(moved_to.size(), 0u) << "none was moved: the race was not run (" << a_refusal << ")";
  EXPECT_GT(refused, 0) << "none was refused: the race was not run";
  std::printf("[ edge     ] %zu rescheduled, %d refused (\"%s\"); answers p50 %.1f ms, p99 %.1f ms; lateness of the "
              "moved: p50 %.1f ms, p99 %.1f ms\n",
              moved_to.size(), refused, a_refusal.c_str(), percentile(answer_ms, 50), percentile(answer_ms, 99),
              percentile(lateness_ms, 50), percentile(lateness_ms, 99));
}

// A handler that snoozes (the C++ library's HandlerResult::snooze, an exec
// handler's exit 75) runs again no sooner than it asked, as the same
// attempt, and a job snoozed past its queue's max_snoozes goes dead with
// that reason.
TEST(JobControl, ASnoozedJobRunsAgainAfterItsDelayAsTheSameAttemptAndTooManySnoozesAreDead) {
  TempDir dir("snooze");
  std::ofstream(dir / "broker.toml") << "[queues.sz]\nmax_snoozes = 3\n";
  Cluster cluster({"--config", (dir / "broker.toml").string()});
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("sz", 4, record.string());
  // An exec handler: the first run asks for 1500 ms on its last stderr line
  // and exits 75, the second succeeds.
  const auto flag = dir / "ran-once";
  const auto runs = dir / "exec-runs.txt";
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "sx", "--exec",
                        fmt::format("later=echo $(date +%s%3N) $DUEQ_ATTEMPT >> {}; if [ -e {} ]; then exit 0; fi; touch {}; "
                                    "echo working >&2; echo 'snooze: 1500ms' >&2; exit 75",
                                    runs.string(), flag.string(), flag.string())});
  ASSERT_TRUE(cluster.wait_for_workers(2));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "sz", .type = "snooze_once", .payload = "1200", .id = "once", .max_attempts = 1}));
  ASSERT_TRUE(client.enqueue({.queue = "sz", .type = "snooze", .payload = "50", .id = "always", .max_attempts = 5}));
  ASSERT_TRUE(client.enqueue({.queue = "sx", .type = "later", .id = "exec", .max_attempts = 1}));

  ASSERT_TRUE(eventually([&] { auto d = client.job_document("once", "sz"); return d && *d && (*d)->state == "done"; }, 20s));
  std::vector<StartRecord> once;
  for (const auto& r : read_records(record))
    if (r.id == "once") once.push_back(r);
  ASSERT_EQ(once.size(), 2u);
  EXPECT_GE(once[1].start_us - once[0].start_us, 1'200'000) << "not before the delay it asked for";
  EXPECT_EQ(once[0].attempt, 1);
  EXPECT_EQ(once[1].attempt, 1) << "a snooze uses no attempt (max_attempts 1 would have made it dead)";

  ASSERT_TRUE(eventually([&] { auto d = client.job_document("always", "sz"); return d && *d && (*d)->state == "dead"; }, 20s));
  const JobDocument dead = **client.job_document("always", "sz");
  EXPECT_NE(dead.last_error.find("snoozed too often (3 times"), std::string::npos) << dead.last_error;
  int always = 0;
  for (const auto& r : read_records(record)) always += r.id == "always" ? 1 : 0;
  EXPECT_EQ(always, 4) << "three snoozes, and the fourth made it dead";

  ASSERT_TRUE(eventually([&] { auto d = client.job_document("exec", "sx"); return d && *d && (*d)->state == "done"; }, 20s));
  std::ifstream in(runs);
  std::vector<int64_t> at;
  for (int64_t ms = 0, attempt = 0; in >> ms >> attempt;) {
    at.push_back(ms);
    EXPECT_EQ(attempt, 1) << "a snooze uses no attempt";
  }
  ASSERT_EQ(at.size(), 2u);
  EXPECT_GE(at[1] - at[0], 1500) << "the exec handler's snooze line was read";
}

// A backlog bigger than its worker can start before the jobs' start-by
// deadline: none starts past it, the jobs not started by then go dead
// "expired" (counted per queue), and none is lost. A deadline that cannot
// be met is refused at enqueue.
TEST(JobControl, JobsNotStartedByTheirDeadlineExpireAndNoneStartsPastIt) {
  Cluster cluster;
  Client client(cluster.endpoint());
  auto refused = client.enqueue({.queue = "sb", .type = "noop", .due_ms = Client::in_ms(60'000), .start_by_ms = Client::in_ms(30'000)});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, EnqueueResult::Status::rejected) << "a deadline before the due time: " << refused->reason;
  // One already past is accepted (a late resend must be answered duplicate)
  // and expires when first leased.
  auto past = client.enqueue({.queue = "sb", .type = "noop", .id = "past-1", .start_by_ms = wall_ms() - 1});
  ASSERT_TRUE(past);
  EXPECT_EQ(past->status, EnqueueResult::Status::accepted) << past->reason;
  auto again = client.enqueue({.queue = "sb", .type = "noop", .id = "past-1", .start_by_ms = wall_ms() - 1});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, EnqueueResult::Status::duplicate);
  EXPECT_EQ(run_dueq(cluster.endpoint(), "enqueue --queue sb --type noop --start-by 2001-01-01T00:00:00Z", true).code, 2);
  const auto cli = run_dueq(cluster.endpoint(), "enqueue --queue sb --type noop --delay 1h --start-within 10m --id cli-1", true);
  ASSERT_EQ(cli.code, 0) << cli.out;
  const JobDocument cli_job = **client.job_document("cli-1", "sb");
  EXPECT_EQ(*cli_job.start_by_ms - *cli_job.due_ms, 600'000) << "--start-within counts from the due time";

  constexpr int kJobs = 300;
  const int64_t start_by = wall_ms() + 1'500;
  std::vector<JobSpec> jobs;
  for (int i = 0; i < kJobs; ++i)
    jobs.push_back({.queue = "sb", .type = "sleep", .payload = "40", .id = fmt::format("sb-{:03}", i), .start_by_ms = start_by});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("sb", 2, record.string());
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("sb"); return s && s->done + s->dead == kJobs + 1; }, 60s))
      << cluster.stats("sb")->done << " done, " << cluster.stats("sb")->dead << " dead";
  const auto stats = *cluster.stats("sb");
  std::set<std::string> started;
  for (const auto& r : read_records(record)) {
    EXPECT_LE(r.start_us / 1000, start_by) << r.id << " started past its deadline";
    started.insert(r.id);
  }
  EXPECT_EQ(static_cast<int64_t>(started.size()), stats.done) << "every job that started ended done";
  EXPECT_GT(stats.dead, 0) << "the backlog outlasted the deadline";
  EXPECT_GT(stats.done, 0);
  EXPECT_EQ(stats.expired, stats.dead) << "each dead job expired";
  // dueq stats says so too, as JSON and in its table.
  const auto shown = run_dueq(cluster.endpoint(), "stats --json", false);
  bool listed = false;
  for (const auto& row : json::parse(shown.out))
    if (row["queue"] == "sb") {
      listed = true;
      EXPECT_EQ(row["expired"], stats.expired) << shown.out;
      EXPECT_EQ(row["snoozed"], 0) << shown.out;
    }
  EXPECT_TRUE(listed) << shown.out;
  EXPECT_NE(run_dueq(cluster.endpoint(), "stats", false).out.find("EXPIRED"), std::string::npos);
  EXPECT_EQ((**client.job_document("past-1", "sb")).state, "dead");
  for (int i = kJobs - 1; i >= 0; --i) {
    const std::string id = fmt::format("sb-{:03}", i);
    if (started.contains(id)) continue;
    const JobDocument doc = **client.job_document(id, "sb");
    EXPECT_EQ(doc.state, "dead");
    EXPECT_TRUE(doc.last_error.starts_with("expired: not started by ")) << doc.last_error;
    EXPECT_EQ(doc.attempt, 0) << "no attempt used";
    break;
  }
  const auto audit = run_dueq(cluster.endpoint(), "audit --queue sb", false);
  EXPECT_EQ(audit.code, 0) << audit.out;
  std::printf("[ start-by ] %lld started before the deadline, %lld expired\n", static_cast<long long>(stats.done),
              static_cast<long long>(stats.expired));
}
