// Browsing a queue's jobs by state: `dueq list` and the dashboard's /api/list.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fstream>
#include <set>

#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

json list_json(Cluster& cluster, const std::string& args) {
  const auto run = run_dueq(cluster.endpoint(), "list " + args + " --json", false);
  EXPECT_EQ(run.code, 0) << args << ": " << run.out;
  return json::parse(run.out, nullptr, false);
}

std::vector<std::string> ids_of(const json& page) {
  std::vector<std::string> out;
  for (const auto& row : page["rows"]) out.push_back(row["id"].get<std::string>());
  return out;
}

}  // namespace

TEST(JobList, PagesWalkEveryJobOfAStateInDueOrderOnceAndFiltersNarrowThem) {
  Cluster cluster;
  Client client(cluster.endpoint());
  const int64_t base = Client::in_ms(3'600'000);
  std::vector<JobSpec> jobs;
  // Due in the reverse of their id order, two at the same millisecond: order is by due time, ties by id.
  for (int i = 0; i < 25; ++i)
    jobs.push_back({"browse", i % 2 == 0 ? "even" : "odd", "p", fmt::format("job-{:02}", i), base + static_cast<int64_t>((24 - i) / 2) * 1000, 3});
  for (int i = 0; i < 5; ++i) jobs.push_back({"browse", "now", "", fmt::format("ready-{}", i), 0, 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));

  // Pages of 7, each going on from the last one's cursor.
  std::vector<std::string> walked;
  std::vector<int64_t> times;
  std::string after;
  for (int page = 0; page < 10; ++page) {
    const json p = list_json(cluster, "browse --state scheduled --limit 7" + (after.empty() ? "" : " --after " + after));
    ASSERT_TRUE(p.is_object());
    for (const auto& row : p["rows"]) {
      walked.push_back(row["id"]);
      times.push_back(row["run_at_ms"]);
      EXPECT_EQ(row["state"], "scheduled");
      EXPECT_TRUE(row["payload"].is_null()) << "rows carry the payload's size only";
      EXPECT_EQ(row["payload_bytes"], 1);
    }
    after = p["next"].get<std::string>();
    if (after.empty()) break;
  }
  ASSERT_EQ(walked.size(), 25U);
  EXPECT_EQ(std::set<std::string>(walked.begin(), walked.end()).size(), 25U) << "each job once";
  for (size_t i = 1; i < walked.size(); ++i)
    EXPECT_TRUE(times[i - 1] < times[i] || (times[i - 1] == times[i] && walked[i - 1] < walked[i])) << walked[i];
  EXPECT_EQ(walked.front(), "job-23");  // due first: (24 - 23) / 2 = 0 and (24 - 24) / 2 = 0 tie; 23 < 24
  EXPECT_EQ(walked[1], "job-24");

  EXPECT_EQ(ids_of(list_json(cluster, "browse --state scheduled --type odd --limit 100")).size(), 12U);
  const auto prefixed = ids_of(list_json(cluster, "browse --state scheduled --id-prefix job-1"));
  EXPECT_EQ(std::set<std::string>(prefixed.begin(), prefixed.end()),
            (std::set<std::string>{"job-10", "job-11", "job-12", "job-13", "job-14", "job-15", "job-16", "job-17", "job-18", "job-19"}));
  // The window holds the jobs due in the first two seconds: job-21..job-24.
  const auto window = ids_of(list_json(cluster, fmt::format("browse --state scheduled --since {} --until {}", base, base + 1000)));
  EXPECT_EQ(window, (std::vector<std::string>{"job-23", "job-24", "job-21", "job-22"}));
  EXPECT_EQ(ids_of(list_json(cluster, "browse --state ready")),
            (std::vector<std::string>{"ready-0", "ready-1", "ready-2", "ready-3", "ready-4"}));
  EXPECT_TRUE(ids_of(list_json(cluster, "browse --state done")).empty());

  // The table names the same jobs.
  const auto table = run_dueq(cluster.endpoint(), "list browse --state ready", false);
  EXPECT_EQ(table.code, 0);
  EXPECT_NE(table.out.find("ready-4"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("5 ready jobs"), std::string::npos) << table.out;
}

TEST(JobList, DeadJobsAreFoundByTheirErrorAndBadFiltersChangeNothing) {
  Cluster cluster;
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "fails"});
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue_batch({{"fails", "fail", "x", "f-1", 0, 1}, {"fails", "fail", "y", "f-2", 0, 1},
                                    {"fails", "noop", "", "ok-1", 0, 1}}));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("fails"); return s && s->dead == 2 && s->done == 1; }, 20s));
  const json dead = list_json(cluster, "fails --state dead --error 'asked to fail'");
  EXPECT_EQ(ids_of(dead), (std::vector<std::string>{"f-1", "f-2"})) << dead;
  EXPECT_EQ(dead["rows"][0]["state"], "dead");
  EXPECT_TRUE(ids_of(list_json(cluster, "fails --state dead --error 'no such text'")).empty());
  EXPECT_EQ(ids_of(list_json(cluster, "fails --state done")), (std::vector<std::string>{"ok-1"}));

  const std::string before = cluster.redis().cli("DBSIZE");
  for (const char* bad : {"fails --state bogus", "fails --state dead --after nonsense", "fails --state dead --after 12:",
                          "fails --state dead --since yesterday", "fails --state dead --limit 0",
                          "fails --state dead --limit 1001", "fails --state dead --since 2000 --until 1000",
                          "'bad queue' --state dead", "fails --state dead --id-prefix 'a b'", "fails"}) {
    const auto run = run_dueq(cluster.endpoint(), std::string("list ") + bad, true);
    EXPECT_EQ(run.code, 2) << bad << ": " << run.out;
  }
  const auto unknown = run_dueq(cluster.endpoint(), "list no-such-queue --state dead", true);
  EXPECT_EQ(unknown.code, 3) << unknown.out;
  EXPECT_EQ(cluster.redis().cli("DBSIZE"), before) << "nothing written";
  EXPECT_TRUE(cluster.broker().running());
}

TEST(JobList, TheDashboardListsAStateAsJobDocumentsAndRefusesBadParameters) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue_batch({{"web", "t", "a", "w-1", Client::in_ms(3'600'000), 3}, {"web", "t", "b", "w-2", Client::in_ms(3'601'000), 3}}));
  httplib::Client web("127.0.0.1", http);
  auto res = web.Get("/api/list?queue=web&state=scheduled&limit=1");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json page = json::parse(res->body);
  ASSERT_EQ(page["rows"].size(), 1U);
  EXPECT_EQ(page["rows"][0]["id"], "w-1");
  EXPECT_EQ(page["rows"][0]["type"], "t");
  const std::string next = page["next"];
  ASSERT_FALSE(next.empty());
  res = web.Get("/api/list?queue=web&state=scheduled&limit=1&after=" + httplib::detail::encode_query_param(next));
  ASSERT_TRUE(res && res->status == 200);
  EXPECT_EQ(json::parse(res->body)["rows"][0]["id"], "w-2");
  // A search of every state, as `dueq search`.
  res = web.Get("/api/search?queue=web&type=t&states=scheduled,ready");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
  EXPECT_EQ(json::parse(res->body)["rows"].size(), 2U) << res->body;
  for (const char* bad : {"/api/search?queue=web&states=nope", "/api/search?queue=web&state=ready",
                          "/api/search?queue=web&after=x"}) {
    res = web.Get(bad);
    ASSERT_TRUE(res) << bad;
    EXPECT_EQ(res->status, 400) << bad << ": " << res->body;
  }
  for (const char* bad : {"/api/list?queue=web&state=nope", "/api/list?queue=web&state=ready&limit=0",
                          "/api/list?queue=web&state=ready&after=x", "/api/list?state=ready",
                          "/api/list?queue=web&state=ready&since=-5"}) {
    res = web.Get(bad);
    ASSERT_TRUE(res) << bad;
    EXPECT_EQ(res->status, 400) << bad << ": " << res->body;
  }
  res = web.Get("/api/list?queue=nothere&state=ready");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404) << res->body;
}

namespace {

std::set<std::string> found(Cluster& cluster, const std::string& args) {
  const auto run = run_dueq(cluster.endpoint(), "search s " + args + " --json", false);
  EXPECT_EQ(run.code, 0) << args << ": " << run.out;
  const json page = json::parse(run.out, nullptr, false);
  std::set<std::string> out;
  if (!page.is_object()) return out;
  for (const auto& row : page["rows"]) out.insert(row["id"].get<std::string>() + "/" + row["state"].get<std::string>());
  EXPECT_EQ(page["next"], "") << args << ": one page holds them";
  return out;
}

}  // namespace

// Rule: `dueq search` finds a queue's jobs in every state (lua/search.lua),
// by type, error text, id prefix, time and state, pages with a cursor, and
// refuses bad filters (exit 2) writing nothing.
TEST(JobSearch, FindsJobsInEveryStateByTheirFiltersAndPagesThroughThem) {
  Cluster cluster;
  const auto config = cluster.dir() / "broker.toml";
  std::ofstream(config) << "[defaults]\nhistory_retention = \"1h\"\n";
  cluster.start_broker({"--config", config.string()});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "s", "--concurrency", "4"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue_batch({{"s", "noop", "", "sched-1", Client::in_ms(3'600'000), 3},
                                    {"s", "noop", "", "cx-1", Client::in_ms(3'600'000), 3},
                                    {"s", "sleep", "30000", "run-1", 0, 3},
                                    {"s", "fail", "x", "dead-1", 0, 1},
                                    {"s", "noop", "", "done-1", 0, 3}}));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("s"); return s && s->done == 1 && s->dead == 1 && s->in_flight == 1; }, 20s));
  ASSERT_EQ(run_dueq(cluster.endpoint(), "cancel cx-1", false).code, 0);
  ASSERT_EQ(run_dueq(cluster.endpoint(), "pause s", false).code, 0);
  ASSERT_TRUE(client.enqueue_batch({{"s", "noop", "", "ready-1", 0, 3}}));

  const std::set<std::string> every{"sched-1/scheduled", "ready-1/ready", "run-1/running", "dead-1/dead", "done-1/done",
                                    "cx-1/cancelled"};
  EXPECT_EQ(found(cluster, ""), every);
  EXPECT_EQ(found(cluster, "--type noop"),
            (std::set<std::string>{"sched-1/scheduled", "ready-1/ready", "done-1/done", "cx-1/cancelled"}));
  EXPECT_EQ(found(cluster, "--states dead,running"), (std::set<std::string>{"run-1/running", "dead-1/dead"}));
  EXPECT_EQ(found(cluster, "--error 'asked to fail'"), (std::set<std::string>{"dead-1/dead"}));
  EXPECT_EQ(found(cluster, "--id-prefix d"), (std::set<std::string>{"dead-1/dead", "done-1/done"}));
  EXPECT_EQ(found(cluster, "--type sleep --states ready,running"), (std::set<std::string>{"run-1/running"}));
  EXPECT_EQ(found(cluster, fmt::format("--since {} --states scheduled,cancelled", Client::in_ms(1'800'000))),
            (std::set<std::string>{"sched-1/scheduled"}));
  EXPECT_TRUE(found(cluster, "--type nothing-like-it").empty());

  // A page of one at a time: every job once, then no cursor.
  std::set<std::string> paged;
  std::string after;
  for (int pages = 0; pages < 20; ++pages) {
    const auto run = run_dueq(cluster.endpoint(), "search s --limit 1 --json" + (after.empty() ? "" : " --after " + after), false);
    ASSERT_EQ(run.code, 0) << run.out;
    const json page = json::parse(run.out);
    for (const auto& row : page["rows"]) paged.insert(row["id"].get<std::string>() + "/" + row["state"].get<std::string>());
    after = page["next"].get<std::string>();
    if (after.empty()) break;
  }
  EXPECT_TRUE(after.empty());
  EXPECT_EQ(paged, every);
  const auto table = run_dueq(cluster.endpoint(), "search s --states dead", false);
  EXPECT_NE(table.out.find("dead-1"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("dead "), std::string::npos) << table.out;

  const std::string before = cluster.redis().cli("DBSIZE");
  for (const char* bad : {"s --states bogus", "s --states dead,", "s --after nonsense", "s --after ready:12x",
                          "s --after bogus:5", "s --state ready", "s --limit 0", "s --since 2000 --until 1000",
                          "s --id-prefix 'a b'", "'bad queue'"}) {
    const auto run = run_dueq(cluster.endpoint(), std::string("search ") + bad, true);
    EXPECT_EQ(run.code, 2) << bad << ": " << run.out;
  }
  EXPECT_EQ(run_dueq(cluster.endpoint(), "search no-such-queue", true).code, 3);
  EXPECT_EQ(cluster.redis().cli("DBSIZE"), before) << "nothing written";
}
