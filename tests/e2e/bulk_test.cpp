// Bulk actions by filter (`dueq bulk`): a dry run counts, a run changes
// exactly the jobs the filter selects at its rate, and a broker killed in
// the middle leaves the rest to the next one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

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
