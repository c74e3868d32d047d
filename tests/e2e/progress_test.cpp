// Progress (docs/jobs.md, "Progress"): a running job's last report is shown
// by its lookup, `dueq job`, `dueq workers` and the dashboard, any bytes
// included; it goes with the job's end; after a broker restart the worker
// sends it again; reports about deliveries a peer does not hold, or
// malformed ones, change nothing beside a healthy worker.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>

#include "tests/support/cluster.hpp"
#include "tests/support/raw_peer.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// An exec handler that reports `first`, waits for the file go1, reports
// `second`, waits for go2 and exits 0.
std::string stepping_command(const std::filesystem::path& dir, const std::string& first, const std::string& second) {
  const auto wait_for = [&](const char* name) {
    return fmt::format("while [ ! -e {}/{} ]; do sleep 0.1; done", dir.string(), name);
  };
  return fmt::format("{} >&4; {}; {} >&4; {}", first, wait_for("go1"), second, wait_for("go2"));
}

json progress_doc(const Cluster& cluster, const std::string& id, const std::string& queue) {
  const auto shown = run_dueq(cluster.endpoint(), fmt::format("job {} --queue {} --json", id, queue), false);
  if (shown.code != 0) return json();
  return json::parse(shown.out, nullptr, false);
}

bool shows_progress(const Cluster& cluster, const std::string& id, const std::string& queue, int percent) {
  const json doc = progress_doc(cluster, id, queue);
  return doc.is_object() && doc["progress"].is_object() && doc["progress"]["percent"] == percent;
}

void touch_file(const std::filesystem::path& path) { std::ofstream{path}; }

}  // namespace

TEST(Progress, AReportIsShownWhileTheJobRunsAnyBytesIncludedAndGoesWithItsEnd) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  const auto dir = cluster.dir();
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "p", "--exec",
                        "steps=" + stepping_command(dir, "echo '40 resized 4 of 10'", "printf '55%% caf\\351\\n'")});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "p", .type = "steps", .id = "img-1"}));

  ASSERT_TRUE(eventually([&] { return shows_progress(cluster, "img-1", "p", 40); }, 20s)) << progress_doc(cluster, "img-1", "p").dump();
  const json doc = progress_doc(cluster, "img-1", "p");
  EXPECT_EQ(doc["state"], "running");
  EXPECT_EQ(doc["progress"]["text"], "resized 4 of 10");
  EXPECT_TRUE(doc["progress"]["at_ms"].is_number());
  EXPECT_TRUE(doc["progress"]["at"].is_string());
  auto typed = client.job_document("img-1", "p");
  ASSERT_TRUE(typed && *typed && (*typed)->progress);
  EXPECT_EQ((*typed)->progress->percent, 40);
  EXPECT_EQ((*typed)->progress->text, "resized 4 of 10");
  const auto text = run_dueq(cluster.endpoint(), "job img-1 --queue p", false);
  EXPECT_NE(text.out.find("progress:     40% resized 4 of 10 (reported "), std::string::npos) << text.out;
  const auto workers = run_dueq(cluster.endpoint(), "workers", false);
  EXPECT_NE(workers.out.find("p/img-1 held "), std::string::npos) << workers.out;
  EXPECT_NE(workers.out.find(" (40% resized 4 of 10)"), std::string::npos) << workers.out;

  // Bytes that are not UTF-8: base64 in JSON, escaped in text views.
  touch_file(dir / "go1");
  ASSERT_TRUE(eventually([&] { return shows_progress(cluster, "img-1", "p", 55); }, 20s));
  EXPECT_EQ(progress_doc(cluster, "img-1", "p")["progress"]["text"], (json{{"encoding", "base64"}, {"data", "Y2Fm6Q=="}}));
  EXPECT_NE(run_dueq(cluster.endpoint(), "job img-1 --queue p", false).out.find("55% caf\\xe9"), std::string::npos);
  // The dashboard's overview lists it beside the job its worker runs.
  httplib::Client web("127.0.0.1", http);
  json running;
  std::string body;
  ASSERT_TRUE(eventually([&] {
    auto r = web.Get("/api/overview");
    if (!r || r->status != 200) return false;
    body = r->body;
    const json overview = json::parse(r->body);
    for (const auto& w : overview["workers"])
      for (const auto& j : w["jobs"])
        if (j["id"] == "img-1" && j["progress"].is_object()) running = j;
    return running.is_object() && running["progress"]["percent"] == 55;
  }, 20s)) << running.dump() << "\n" << body;
  EXPECT_EQ(running["progress"]["text"], (json{{"encoding", "base64"}, {"data", "Y2Fm6Q=="}}));

  touch_file(dir / "go2");
  auto end = client.wait("img-1", "p", 20s);
  ASSERT_TRUE(end && end->state == JobEnd::State::done);
  EXPECT_TRUE(progress_doc(cluster, "img-1", "p")["progress"].is_null()) << "a done job shows no progress";
  EXPECT_EQ(run_dueq(cluster.endpoint(), "workers", false).out.find("img-1"), std::string::npos);
}

// The broker keeps progress in memory only: a restarted one learns it
// again from the worker, which sends each running job's latest report
// after its new WELCOME, without the handler reporting again.
TEST(Progress, AfterABrokerRestartTheWorkerSendsTheLatestReportAgain) {
  Cluster cluster;
  const auto dir = cluster.dir();
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "p", "--exec",
                        "steps=" + stepping_command(dir, "echo '70 seventy'", "echo '80 eighty'")});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "p", .type = "steps", .id = "long-1"}));
  ASSERT_TRUE(eventually([&] { return shows_progress(cluster, "long-1", "p", 70); }, 20s));
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait(10s);
  cluster.start_broker();
  ASSERT_TRUE(eventually([&] { return shows_progress(cluster, "long-1", "p", 70); }, 30s))
      << "the restarted broker never learned the report: " << progress_doc(cluster, "long-1", "p").dump();
  EXPECT_EQ(progress_doc(cluster, "long-1", "p")["progress"]["text"], "seventy");
  touch_file(dir / "go1");
  ASSERT_TRUE(eventually([&] { return shows_progress(cluster, "long-1", "p", 80); }, 20s));
  touch_file(dir / "go2");
  auto end = client.wait("long-1", "p", 20s);
  ASSERT_TRUE(end && end->state == JobEnd::State::done);
}

// A peer may send PROGRESS about any job: only its own deliveries take it.
// A forged token, a job it does not hold, an unregistered sender, a percent
// over 100 or a text over 256 bytes change nothing; floods of reports cost
// the broker little and lose nothing of a healthy worker's.
TEST(Progress, ForgedMalformedAndFloodedReportsChangeNothingBesideAHealthyWorker) {
  Cluster cluster;
  const auto dir = cluster.dir();
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "p", "--queue", "n",
                        "--concurrency", "4", "--exec", "steps=" + stepping_command(dir, "echo '40 healthy'", "true"),
                        "--exec", "noop=true"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "p", .type = "steps", .id = "mine"}));
  ASSERT_TRUE(eventually([&] { return shows_progress(cluster, "mine", "p", 40); }, 20s));

  RawPeer stranger(cluster.endpoint(), "stranger");
  stranger.send(proto::Progress{{{"p", "mine", 1, 99, proto::Bytes{"unregistered"}}}});
  RawPeer forger(cluster.endpoint(), "forger");
  forger.send(proto::Hello{"forger", {"p"}, 1, {}, "host", 1});
  auto welcome = forger.receive();
  ASSERT_TRUE(welcome && std::holds_alternative<proto::Welcome>(*welcome));
  std::vector<proto::ProgressItem> forged;
  for (uint64_t token = 1; token <= 10'000; ++token) forged.push_back({"p", "mine", token * 7919, 99, proto::Bytes{"forged"}});
  forger.send(proto::Progress{forged});

  // Malformed: answered bad_frame, nothing kept.
  const auto refused = [&](const std::string& bytes) {
    forger.send_raw(bytes);
    for (int i = 0; i < 5; ++i) {
      auto reply = forger.receive(2s);
      if (!reply) return false;
      if (auto* e = std::get_if<proto::ErrorFrame>(&*reply)) return e->code == "bad_frame";
    }
    return false;
  };
  EXPECT_TRUE(refused(proto::encode(proto::Progress{{{"p", "mine", 1, 101, proto::Bytes{"x"}}}}))) << "percent over 100";
  EXPECT_TRUE(refused(proto::encode(proto::Progress{{{"p", "mine", 1, 50, proto::Bytes{std::string(257, 'x')}}}})))
      << "text over 256 bytes";
  EXPECT_TRUE(refused(proto::encode(proto::Progress{}))) << "no items";

  // A flood: 50 frames of 10,000 reports each about jobs the forger does
  // not hold, while the healthy worker runs its jobs.
  constexpr int kHealthyJobs = 500;
  std::vector<JobSpec> jobs;
  for (int i = 0; i < kHealthyJobs; ++i) jobs.push_back({.queue = "n", .type = "noop", .id = fmt::format("n-{}", i)});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  std::vector<proto::ProgressItem> flood;
  for (int i = 0; i < 10'000; ++i)
    flood.push_back({"n", fmt::format("n-{}", i % kHealthyJobs), 42, 1, proto::Bytes{std::string(256, 'f')}});
  for (int i = 0; i < 50; ++i) forger.send(proto::Progress{flood});
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("n"); return s && s->done == kHealthyJobs; }, 120s))
      << "the healthy worker's jobs did not all run";

  const json doc = progress_doc(cluster, "mine", "p");
  EXPECT_EQ(doc["progress"]["percent"], 40) << doc.dump();
  EXPECT_EQ(doc["progress"]["text"], "healthy");
  EXPECT_EQ(run_dueq(cluster.endpoint(), "workers", false).out.find("forged"), std::string::npos);
  touch_file(dir / "go1");
  touch_file(dir / "go2");
  auto end = client.wait("mine", "p", 20s);
  ASSERT_TRUE(end && end->state == JobEnd::State::done);
  EXPECT_TRUE(cluster.broker().running());
}
