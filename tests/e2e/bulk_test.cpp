// Bulk actions by filter (`dueq bulk`): a dry run counts, a run changes
// exactly the jobs the filter selects at its rate, and a broker killed in
// the middle leaves the rest to the next one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

json status_of(Cluster& cluster, const std::string& id) {
  const auto run = run_dueq(cluster.endpoint(), "bulk status " + id + " --json", false);
  if (run.code != 0) return json();
  const json j = json::parse(run.out, nullptr, false);
  return j.is_object() && !j["rows"].empty() ? j["rows"][0] : json();
}

}  // namespace

TEST(Bulk, ADryRunCountsAndChangesNothingAndARunCancelsExactlyTheFilteredJobs) {
  Cluster cluster;
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 300; ++i)
    jobs.push_back({"bq", i % 2 == 0 ? "a" : "b", "", fmt::format("j-{:03}", i), Client::in_ms(3'600'000 + i), 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));

  const std::string keys_before = cluster.redis().cli("DBSIZE");
  const auto dry = run_dueq(cluster.endpoint(), "bulk run cancel bq --state scheduled --type a --dry-run --json", false);
  ASSERT_EQ(dry.code, 0) << dry.out;
  EXPECT_EQ(json::parse(dry.out)["rows"][0]["matched"], "150") << dry.out;
  EXPECT_EQ(cluster.stats("bq")->scheduled, 300);
  EXPECT_EQ(cluster.redis().cli("DBSIZE"), keys_before) << "a dry run writes nothing";

  for (const char* bad : {"bulk run replay bq --state scheduled", "bulk run cancel bq --state dead",
                          "bulk run cancel bq --state scheduled --rate 0", "bulk run cancel bq --state scheduled --rate fast",
                          "bulk run cancel bq --state scheduled --since notatime", "bulk run erase bq --state dead",
                          "bulk run cancel 'b q' --state scheduled"}) {
    const auto run = run_dueq(cluster.endpoint(), bad, true);
    EXPECT_EQ(run.code, 2) << bad << ": " << run.out;
  }
  EXPECT_EQ(run_dueq(cluster.endpoint(), "bulk run cancel nowhere --state scheduled", true).code, 3);
  EXPECT_EQ(cluster.redis().cli("DBSIZE"), keys_before) << "bad input writes nothing";

  const auto run = run_dueq(cluster.endpoint(), "bulk run cancel bq --state scheduled --type a --rate 500/s", false);
  ASSERT_EQ(run.code, 0) << run.out;
  EXPECT_NE(run.out.find("jobs changed"), std::string::npos) << "progress is shown: " << run.out;
  EXPECT_NE(run.out.find("finished cancel in queue bq"), std::string::npos) << run.out;
  const auto stats = *cluster.stats("bq");
  EXPECT_EQ(stats.scheduled, 150);
  EXPECT_EQ(stats.cancelled, 150);
  for (int i = 0; i < 300; i += 37) {
    auto doc = client.job_document(fmt::format("j-{:03}", i), "bq");
    ASSERT_TRUE(doc && *doc);
    EXPECT_EQ((*doc)->state, i % 2 == 0 ? "cancelled" : "scheduled") << i;
  }
  // One line when it started and one when it ended, naming key, queue, filter and count.
  const std::string log = read_file(cluster.dir() / "broker.log");
  EXPECT_NE(log.find("started by key -: cancel in queue bq (state=scheduled type=a) at 500/s"), std::string::npos) << log;
  EXPECT_NE(log.find("finished: cancel in queue bq (state=scheduled type=a): 150 jobs changed"), std::string::npos) << log;
}

TEST(Bulk, AnActionInterruptedByABrokerKillIsFinishedByTheNextLeader) {
  Cluster cluster;
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 600; ++i) jobs.push_back({"big", "x", "", fmt::format("x-{:03}", i), Client::in_ms(3'600'000 + i), 3});
  for (int i = 0; i < 10; ++i) jobs.push_back({"keep", "x", "", fmt::format("k-{}", i), Client::in_ms(3'600'000), 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  const auto started = run_dueq(cluster.endpoint(), "bulk run cancel big --state scheduled --rate 100/s --no-wait --json", false);
  ASSERT_EQ(started.code, 0) << started.out;
  const std::string id = json::parse(started.out)["rows"][0]["id"];
  ASSERT_TRUE(eventually([&] { const json s = status_of(cluster, id); return s.is_object() && std::stoi(s["changed"].get<std::string>()) >= 100; }, 20s));
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait(10s);
  const json at_kill = [&] {  // read from the store: no broker answers now
    return json::parse(cluster.redis().cli("HGET dueq:{leader}:bulk " + id), nullptr, false);
  }();
  ASSERT_TRUE(at_kill.is_object());
  EXPECT_EQ(at_kill["status"], "running");
  EXPECT_LT(at_kill["changed"].get<int64_t>(), 600) << "killed in the middle";
  cluster.start_broker();
  ASSERT_TRUE(eventually([&] { const json s = status_of(cluster, id); return s.is_object() && s["status"] == "finished"; }, 30s))
      << status_of(cluster, id);
  const auto big = *cluster.stats("big");
  EXPECT_EQ(big.scheduled, 0);
  EXPECT_EQ(big.cancelled, 600) << "every job once, none twice";
  EXPECT_EQ(cluster.stats("keep")->scheduled, 10) << "another queue is untouched";
  std::printf("[ bulk     ] %lld of 600 cancelled when the broker was killed; the next one finished the rest\n",
              static_cast<long long>(at_kill["changed"].get<int64_t>()));
}

// run_now sends the scheduled jobs a filter selects to run at once, at its
// rate; reschedule moves others to a new due time, earlier than the loop
// knew of, and they run then, not at their old time.
TEST(Bulk, RunNowRunsTheSelectedScheduledJobsAndRescheduleMovesOthersToTheirNewTime) {
  Cluster cluster;
  const auto record = cluster.dir() / "starts.txt";
  cluster.start_example_worker("soon", 4, record.string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 40; ++i)
    jobs.push_back({"soon", i % 2 == 0 ? "noop" : "sleep", i % 2 == 0 ? "" : "1", fmt::format("s-{:02}", i),
                    Client::in_ms(3'600'000 + i), 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  for (const char* bad : {"bulk run run_now soon --state ready", "bulk run reschedule soon --state scheduled",
                          "bulk run reschedule soon --state scheduled --in soon", "bulk run run_now soon --state scheduled --in 1s",
                          "bulk run reschedule soon --state dead --in 1s",
                          "bulk run reschedule soon --state scheduled --at 2026-13-01T00:00:00Z",
                          "bulk run cancel soon --state scheduled --spread 1m",
                          "bulk run reschedule soon --state scheduled --in 1s --spread 31d",
                          "bulk run reschedule soon --state scheduled --in 1s --spread often"}) {
    const auto run = run_dueq(cluster.endpoint(), bad, true);
    EXPECT_EQ(run.code, 2) << bad << ": " << run.out;
  }
  EXPECT_EQ(cluster.stats("soon")->scheduled, 40) << "bad input changes nothing";

  const auto run_now = run_dueq(cluster.endpoint(), "bulk run run_now soon --state scheduled --type noop --rate 100/s", false);
  ASSERT_EQ(run_now.code, 0) << run_now.out;
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("soon"); return s && s->done == 20; }, 20s));
  EXPECT_EQ(cluster.stats("soon")->scheduled, 20);
  auto untouched = client.job_document("s-01", "soon");
  ASSERT_TRUE(untouched && *untouched);
  EXPECT_EQ((*untouched)->state, "scheduled");

  // The loop knew of nothing due before an hour from now: the new time,
  // 3 s ahead, is what it waits for now.
  const int64_t asked_ms = dueq::wall_ms();
  const auto moved = run_dueq(cluster.endpoint(), "bulk run reschedule soon --state scheduled --in 3s --spread 2s", false);
  ASSERT_EQ(moved.code, 0) << moved.out;
  EXPECT_NE(moved.out.find("20 jobs changed"), std::string::npos) << moved.out;
  auto doc = client.job_document("s-01", "soon");
  ASSERT_TRUE(doc && *doc);
  EXPECT_EQ((*doc)->state, "scheduled");
  EXPECT_GE(*(*doc)->run_at_ms, asked_ms + 3000);
  EXPECT_LT(*(*doc)->run_at_ms, asked_ms + 60'000);
  const auto status = json::parse(run_dueq(cluster.endpoint(), "bulk status --json", false).out, nullptr, false);
  ASSERT_TRUE(status.is_object());
  EXPECT_EQ(status["rows"][0]["spread_ms"], "2000") << status.dump();
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("soon"); return s && s->done == 40; }, 30s));
  // None ran before its new due time.
  std::ifstream starts(record);
  int counted = 0;
  for (std::string id, line; starts >> id && std::getline(starts, line);) {
    if (id.starts_with("s-") && std::stoi(id.substr(2)) % 2 == 1) {
      std::istringstream fields(line);
      int64_t attempt = 0, start_us = 0;
      uint64_t token = 0;
      fields >> attempt >> token >> start_us;
      EXPECT_GE(start_us / 1000, asked_ms + 3000) << id;
      ++counted;
    }
  }
  EXPECT_EQ(counted, 20);
}
