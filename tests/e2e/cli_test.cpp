// The dueq command line: output, exit codes and input validation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <set>
#include <sstream>

#include "tests/support/cluster.hpp"

using namespace dueq::testing;

namespace {

CliRun dueq_cli(const std::string& broker, const std::string& args, bool with_stderr = false) {
  return run_dueq(broker, args, with_stderr);
}

}  // namespace

TEST(Cli, EnqueuePrintsTheIdAndARetryWithTheSameIdMakesNoSecondJob) {
  Cluster cluster;
  auto first = dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --payload hi --delay 1h --id my-job");
  EXPECT_EQ(first.code, 0);
  EXPECT_EQ(first.out, "my-job\n");
  auto again = dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --payload hi --delay 1h --id my-job", true);
  EXPECT_EQ(again.code, 0);
  EXPECT_NE(again.out.find("already existed"), std::string::npos);
  auto generated = dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --payload hi --at 2030-01-01T00:00:00Z");
  EXPECT_EQ(generated.code, 0);
  EXPECT_EQ(generated.out.size(), 27u);  // 26-character id + newline

  auto stats = dueq_cli(cluster.endpoint(), "stats --json");
  ASSERT_EQ(stats.code, 0);
  auto json = nlohmann::json::parse(stats.out);
  ASSERT_EQ(json.size(), 1u);
  EXPECT_EQ(json[0]["queue"], "q");
  EXPECT_EQ(json[0]["scheduled"], 2);
  EXPECT_EQ(json[0]["accepted"], 2);

  auto job = dueq_cli(cluster.endpoint(), "job my-job --json");
  ASSERT_EQ(job.code, 0);
  auto j = nlohmann::json::parse(job.out);
  EXPECT_EQ(j["state"], "scheduled");
  EXPECT_EQ(j["payload"], "hi");
  EXPECT_EQ(j["queue"], "q");
}

TEST(Cli, EnqueueFromJsonLinesReportsCountsAndBadLines) {
  Cluster cluster;
  const auto file = cluster.dir() / "jobs.jsonl";
  std::ofstream(file) << R"({"queue":"q","type":"t","payload":"a","delay_ms":60000})" << "\n"
                      << R"({"queue":"q","type":"t","payload":{"k":1},"at_ms":1900000000000,"id":"x1"})" << "\n"
                      << R"({"queue":"q","type":"t","id":"x1"})" << "\n"
                      << "not json\n"
                      << R"({"queue":"q","type":"t","colour":"red"})" << "\n";
  auto run = dueq_cli(cluster.endpoint(), "enqueue --from " + file.string(), true);
  EXPECT_EQ(run.code, 2);  // some lines were rejected
  EXPECT_NE(run.out.find("accepted 2, duplicate 1, rejected 2"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(":4:"), std::string::npos) << "bad line number reported";
  EXPECT_NE(run.out.find("unknown field 'colour'"), std::string::npos);
}

// Batches from a file go out several at a time; when they fail, the id of
// every job sent (generated ones included) is shown, so a retry can reuse them.
TEST(Cli, AFileIsSentSeveralBatchesAtATimeAndAFailureNamesEveryIdSent) {
  const auto dir = make_temp_dir("cli");
  const auto file = dir / "jobs.jsonl";
  {
    std::ofstream out(file);
    for (int i = 0; i < 2'500; ++i) out << R"({"queue":"q","type":"t"})" << "\n";
  }
  const std::string nobody = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto run = run_dueq(nobody, "--timeout 200ms enqueue --from " + file.string(), true);
  EXPECT_EQ(run.code, 75) << run.out.substr(0, 500);
  std::set<std::string> ids, lines;
  std::istringstream text(run.out);
  for (std::string line; std::getline(text, line);) {
    const auto id_at = line.find(": id "), unknown_at = line.find(" (outcome unknown)");
    if (id_at == std::string::npos || unknown_at == std::string::npos) continue;
    lines.insert(line.substr(0, id_at));
    ids.insert(line.substr(id_at + 5, unknown_at - id_at - 5));
  }
  EXPECT_EQ(lines.size(), 2'500u) << "every line sent is named";
  EXPECT_EQ(ids.size(), 2'500u) << "each with its own id";
  std::filesystem::remove_all(dir);
}

// A done job keeps its id and finish time only: `dueq job` shows those and
// says so, instead of "attempt 0 of 0" and empty fields.
TEST(Cli, ADoneJobShowsWhatIsKnownOfIt) {
  Cluster cluster;
  cluster.start_example_worker("q", 1, (cluster.dir() / "starts.txt").string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  ASSERT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type noop --id finished").code, 0);
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("q"); return s && s->done == 1; }, std::chrono::seconds(10)));
  auto shown = dueq_cli(cluster.endpoint(), "job finished");
  EXPECT_EQ(shown.code, 0) << shown.out;
  EXPECT_NE(shown.out.find("state:        done"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("finished:"), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out.find("attempt:"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("deleted when it finished"), std::string::npos) << shown.out;
  auto json = nlohmann::json::parse(dueq_cli(cluster.endpoint(), "job finished --json").out);
  EXPECT_EQ(json["state"], "done");
  EXPECT_TRUE(json["attempt"].is_null()) << json.dump();
  EXPECT_GT(json["finished_ms"].get<int64_t>(), 0);
}

TEST(Cli, BadFlagsAreUsageErrorsAndChangeNothing) {
  Cluster cluster;
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --delay soon").code, 2);
  // 30 what? Once read as 30 ms, which ran a job meant for later at once.
  auto unitless = dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --delay 30", true);
  EXPECT_EQ(unitless.code, 2);
  EXPECT_NE(unitless.out.find("no unit: use ms, s, m, h or d"), std::string::npos) << unitless.out;
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --at yesterday").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --delay 1s --at-ms 5").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue 'bad queue' --type t").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --type t").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --backoff-base soon").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "frobnicate").code, 2);
  EXPECT_EQ(cluster.queue_keys(), "");
}

TEST(Cli, UnknownJobIsNotFoundAndNoBrokerIsATemporaryFailure) {
  Cluster cluster;
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "job no-such-job").code, 3);
  const std::string nobody = "tcp://127.0.0.1:" + std::to_string(free_port());
  EXPECT_EQ(dueq_cli(nobody, "--timeout 200ms stats").code, 75);
}
