// A job's W3C trace context (docs/jobs.md, "Tracing"): given at enqueue by
// a client, or by `dueq enqueue` from its flags or its TRACEPARENT, it is
// kept with the job through a retry, the dead letters and a replay, shown
// in the job document, and handed to every run of the handler (here an
// exec handler's environment; the HTTP handler's headers are checked in
// http_handler_test.cpp). A malformed one is refused and nothing is kept.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

constexpr const char* kParentA = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
constexpr const char* kParentB = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
constexpr const char* kWorkerOwn = "00-11111111111111111111111111111111-2222222222222222-01";

std::vector<std::string> trace_runs_of(const std::filesystem::path& file) {
  std::vector<std::string> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST(Tracing, ATraceContextReachesEveryRunThroughARetryTheDeadLettersAndAReplay) {
  const auto config_dir = make_temp_dir("trace");
  const auto config = config_dir / "broker.toml";
  std::ofstream(config) << "[queues.tr]\nhistory_retention = \"1h\"\n";  // done jobs keep their documents
  Cluster cluster({"--config", config.string()});
  const auto runs = cluster.dir() / "runs.txt";
  const auto healed = cluster.dir() / "healed";
  // Fails a job's first attempt, and every attempt of "dies" until `healed`
  // exists; each run writes its id, attempt and trace context.
  const std::string command = fmt::format(
      "echo \"$DUEQ_JOB_ID $DUEQ_ATTEMPT [$TRACEPARENT] [$TRACESTATE]\" >> {}; "
      "[ \"$DUEQ_JOB_ID\" = dies ] && [ ! -e {} ] && exit 3; [ \"$DUEQ_ATTEMPT\" -ge 2 ] || [ \"$DUEQ_JOB_ID\" != retried ]",
      runs.string(), healed.string());
  // The worker's own TRACEPARENT is not a job's: a job without one runs without it.
  cluster.start_worker({"/usr/bin/env", std::string("TRACEPARENT=") + kWorkerOwn, bin("dueq-worker"), "--broker",
                        cluster.endpoint(), "--queue", "tr", "--exec", "t=" + command});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "tr", .type = "t", .id = "retried", .max_attempts = 2, .backoff_base_ms = 100,
                              .backoff_cap_ms = 100, .traceparent = kParentA, .tracestate = "rojo=00f067aa0ba902b7"}));
  ASSERT_TRUE(client.enqueue({.queue = "tr", .type = "t", .id = "dies", .max_attempts = 1, .traceparent = kParentB}));
  ASSERT_TRUE(client.enqueue({.queue = "tr", .type = "t", .id = "plain"}));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("tr"); return s && s->done == 2 && s->dead == 1; }, 20s));

  auto dead = client.job_document("dies", "tr");
  ASSERT_TRUE(dead && *dead);
  EXPECT_EQ((*dead)->state, "dead");
  EXPECT_EQ((*dead)->traceparent, kParentB) << "kept with the dead letter";
  std::ofstream(healed) << "";
  const auto replay = run_dueq(cluster.endpoint(), "dead replay dies");
  EXPECT_EQ(replay.code, 0) << replay.out;
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("tr"); return s && s->done == 3; }, 20s));

  const std::vector<std::string> want = {
      fmt::format("retried 1 [{}] [rojo=00f067aa0ba902b7]", kParentA), fmt::format("retried 2 [{}] [rojo=00f067aa0ba902b7]", kParentA),
      fmt::format("dies 1 [{}] []", kParentB), "plain 1 [] []"};
  const auto ran = trace_runs_of(runs);
  for (const auto& line : want) EXPECT_NE(std::find(ran.begin(), ran.end(), line), ran.end()) << line << " not in the runs";
  EXPECT_EQ(std::count(ran.begin(), ran.end(), fmt::format("dies 1 [{}] []", kParentB)), 2) << "the replayed run carries it too";
  EXPECT_EQ(ran.size(), 5u);

  auto doc = client.job_document("retried", "tr");
  ASSERT_TRUE(doc && *doc);
  EXPECT_EQ((*doc)->traceparent, kParentA);
  EXPECT_EQ((*doc)->tracestate, "rojo=00f067aa0ba902b7");
  const auto json = run_dueq(cluster.endpoint(), "job retried --json", false);
  EXPECT_NE(json.out.find(std::string("\"traceparent\":\"") + kParentA + "\""), std::string::npos) << json.out;
  std::filesystem::remove_all(config_dir);
}

TEST(Tracing, DueqEnqueueTakesTheContextFromItsFlagsOrItsEnvironmentAndRefusesAMalformedOne) {
  Cluster cluster;
  Client client(cluster.endpoint());
  const auto flags = run_dueq(cluster.endpoint(), fmt::format("enqueue --queue tr --type t --id by-flag --delay 1h "
                                                              "--traceparent {} --tracestate a=1", kParentA));
  ASSERT_EQ(flags.code, 0) << flags.out;
  const auto env = run_dueq(cluster.endpoint(), "enqueue --queue tr --type t --id by-env --delay 1h");
  ASSERT_EQ(env.code, 0) << env.out;
  const std::string traced_cli = fmt::format("TRACEPARENT={} TRACESTATE=b=2 {}", kParentB, bin("dueq"));
  const auto inherited = std::system(fmt::format("{} --broker {} enqueue --queue tr --type t --id inherited --delay 1h >/dev/null",
                                                 traced_cli, cluster.endpoint()).c_str());
  ASSERT_EQ(inherited, 0);
  auto doc = [&](const char* id) { return **client.job_document(id, "tr"); };
  EXPECT_EQ(doc("by-flag").traceparent, kParentA);
  EXPECT_EQ(doc("by-flag").tracestate, "a=1");
  EXPECT_EQ(doc("by-env").traceparent, "") << "none given, none kept";
  EXPECT_EQ(doc("inherited").traceparent, kParentB) << "a command run inside a traced process carries its context";
  EXPECT_EQ(doc("inherited").tracestate, "b=2");

  for (const char* bad : {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
                          "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                          "00-00000000000000000000000000000000-b7ad6b7169203331-01"}) {
    const auto refused = run_dueq(cluster.endpoint(), fmt::format("enqueue --queue tr --type t --id bad --traceparent {}", bad));
    EXPECT_EQ(refused.code, 2) << bad << ": " << refused.out;
    EXPECT_NE(refused.out.find("traceparent"), std::string::npos) << refused.out;
    // Past the client's own check, the broker refuses it too.
    auto sent = client.enqueue({.queue = "tr", .type = "t", .id = "bad", .traceparent = bad});
    ASSERT_TRUE(sent) << sent.error().message;
    EXPECT_EQ(sent->status, EnqueueResult::Status::rejected) << bad;
    EXPECT_NE(sent->reason.find("traceparent"), std::string::npos) << sent->reason;
  }
  auto state_alone = client.enqueue({.queue = "tr", .type = "t", .id = "bad", .tracestate = "a=1"});
  ASSERT_TRUE(state_alone);
  EXPECT_EQ(state_alone->status, EnqueueResult::Status::rejected);
  EXPECT_FALSE(*client.job_document("bad", "tr")) << "nothing was kept of a refused job";
}
