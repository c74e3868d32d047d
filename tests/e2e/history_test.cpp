// Finished jobs' history: a done job's whole document is kept for its
// queue's history_retention and history_max, then trimmed by time with no
// job flowing, counted, logged; its id stays for done_retention.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fstream>

#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

json job_json(Cluster& cluster, const std::string& queue, const std::string& id) {
  const auto run = run_dueq(cluster.endpoint(), fmt::format("job {} --queue {} --json", id, queue), false);
  EXPECT_EQ(run.code, 0) << run.out;
  return json::parse(run.out, nullptr, false);
}

}  // namespace

TEST(History, ADoneJobsDocumentIsKeptThenTrimmedByTimeWithNoTrafficCountedAndLogged) {
  Cluster cluster;
  const int http = free_port();
  const auto config = cluster.dir() / "broker.toml";
  std::ofstream(config) << "[queues.hist]\nhistory_retention = \"4s\"\n[queues.few]\nhistory_retention = \"1h\"\nhistory_max = 2\n";
  cluster.start_broker({"--config", config.string(), "--http", fmt::format("127.0.0.1:{}", http)});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "hist", "--queue", "few"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  const std::string payload("not utf-8 \xff\xfe", 12);
  for (int i = 0; i < 5; ++i) jobs.push_back({"hist", "noop", payload, fmt::format("h-{}", i), 0, 3});
  for (int i = 0; i < 4; ++i) jobs.push_back({"few", "noop", "", fmt::format("f-{}", i), 0, 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("hist"); return s && s->done == 5; }, 20s));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("few"); return s && s->done == 4; }, 20s));

  // Kept: the whole document, with when it started and who ran it.
  const json doc = job_json(cluster, "hist", "h-0");
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["state"], "done");
  EXPECT_EQ(doc["record_kept"], true);
  EXPECT_EQ(doc["type"], "noop");
  EXPECT_EQ(doc["payload"]["encoding"], "base64") << doc.dump();
  EXPECT_EQ(doc["payload_bytes"], payload.size());
  EXPECT_EQ(doc["attempt"], 1);
  EXPECT_TRUE(doc["worker"].is_string()) << doc.dump();
  ASSERT_TRUE(doc["started_ms"].is_number()) << doc.dump();
  EXPECT_LE(doc["started_ms"].get<int64_t>(), doc["finished_ms"].get<int64_t>());
  EXPECT_GE(doc["started_ms"].get<int64_t>(), doc["created_ms"].get<int64_t>() - 1000);

  // history_max 2: the two newest done jobs of "few" keep their document.
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("few"); return s && s->history_kept == 2 && s->history_trimmed == 2; }, 20s));
  const auto listed = run_dueq(cluster.endpoint(), "list few --state done --json", false);
  const json page = json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(page.is_object()) << listed.out;
  int kept = 0;
  for (const auto& row : page["rows"]) kept += row["record_kept"].get<bool>() ? 1 : 0;
  EXPECT_EQ(page["rows"].size(), 4u);
  EXPECT_EQ(kept, 2);

  // With nothing flowing, "hist" loses every document after 4 s; the ids stay.
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("hist"); return s && s->history_kept == 0; }, 40s));
  const auto s = cluster.stats("hist");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->history_trimmed, 5);
  const json gone = job_json(cluster, "hist", "h-0");
  EXPECT_EQ(gone["state"], "done");
  EXPECT_EQ(gone["record_kept"], false);
  EXPECT_TRUE(gone["payload"].is_null());
  EXPECT_TRUE(gone["started"].is_null());
  EXPECT_GE(cluster.log_count("documents trimmed from its history"), 1u);
  // The metric says it too.
  httplib::Client web("127.0.0.1", http);
  ASSERT_TRUE(eventually([&] {
    auto r = web.Get("/metrics");
    return r && r->body.find("dueq_history_trimmed_total{queue=\"hist\"} 5") != std::string::npos &&
           r->body.find("dueq_history_kept{queue=\"few\"} 2") != std::string::npos;
  }, 10s));
}

// Cancelled jobs keep their document too, and a queue whose history is
// turned off keeps none; turned off after it kept some, those are trimmed.
TEST(History, ACancelledJobKeepsItsDocumentAndHistoryTurnedOffIsEmptied) {
  Cluster cluster;
  const auto keeping = cluster.dir() / "keeping.toml";
  std::ofstream(keeping) << "[defaults]\nhistory_retention = \"1h\"\n";
  cluster.start_broker({"--config", keeping.string()});
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue_batch({{"later", "noop", "p", "c-1", Client::in_ms(600'000), 3}}));
  const auto cancel = run_dueq(cluster.endpoint(), "cancel c-1 --queue later");
  ASSERT_EQ(cancel.code, 0) << cancel.out;
  const json doc = job_json(cluster, "later", "c-1");
  EXPECT_EQ(doc["state"], "cancelled");
  EXPECT_EQ(doc["record_kept"], true) << doc.dump();
  EXPECT_EQ(doc["payload"], "p");
  EXPECT_TRUE(doc["worker"].is_null());

  const auto config = cluster.dir() / "broker.toml";
  std::ofstream(config) << "[defaults]\nhistory_retention = \"0s\"\n";
  cluster.start_broker({"--config", config.string()});
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("later"); return s && s->history_kept == 0 && s->history_trimmed == 1; }, 40s));
  EXPECT_EQ(job_json(cluster, "later", "c-1")["record_kept"], false);
  ASSERT_TRUE(client.enqueue_batch({{"later", "noop", "p", "c-2", Client::in_ms(600'000), 3}}));
  ASSERT_EQ(run_dueq(cluster.endpoint(), "cancel c-2 --queue later").code, 0);
  const json off = job_json(cluster, "later", "c-2");
  EXPECT_EQ(off["state"], "cancelled");
  EXPECT_EQ(off["record_kept"], false);
  EXPECT_EQ(cluster.redis().cli("HLEN 'dueq:{later}:history'"), "0");
}
