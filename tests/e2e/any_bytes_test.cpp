// Payloads, error texts and worker ids may hold any bytes. Every JSON view
// (the HTTP API and the CLI's --json) carries them: text when it is UTF-8,
// {"encoding": "base64", "data": ...} otherwise; nothing a client sends
// makes the broker answer 500 or abort.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "common/json_bytes.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/raw_peer.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const std::string kPayload("\xff\xfe\x00ok\x80", 6);

// The bytes a JSON view carries for a value that is not UTF-8: only the base64 form.
std::string base64_bytes(const json& value) {
  EXPECT_TRUE(value.is_object()) << value;
  EXPECT_EQ(value.value("encoding", ""), "base64") << value;
  return bytes_from_json(value).value_or("<not decodable>");
}

json get_json(httplib::Client& web, const std::string& path) {
  auto res = web.Get(path);
  if (!res) return json();
  EXPECT_EQ(res->status, 200) << path << ": " << res->body;
  return json::parse(res->body, nullptr, false);
}

}  // namespace

TEST(AnyBytes, DeadJobsAndLookupsCarryPayloadsAndErrorsThatAreNotUtf8) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "bytes"});
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"bytes", "fail", kPayload, "bad-1", 0, 1}));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("bytes"); return s && s->dead == 1; }, 20s));
  const std::string error = "attempts exhausted (1): asked to fail: " + kPayload;

  httplib::Client web("127.0.0.1", http);
  const json dead = get_json(web, "/api/dead?queue=bytes");
  ASSERT_TRUE(dead.is_object()) << dead;
  ASSERT_EQ(dead["rows"].size(), 1U) << dead;
  EXPECT_EQ(dead["rows"][0]["id"], "bad-1");
  EXPECT_EQ(base64_bytes(dead["rows"][0]["last_error"]), error);
  EXPECT_EQ(dead["rows"][0]["payload_bytes"], kPayload.size()) << "a list row names the payload's size";

  const json job = get_json(web, "/api/job?id=bad-1&queue=bytes");
  ASSERT_TRUE(job.is_object()) << job;
  EXPECT_EQ(base64_bytes(job["job"]["payload"]), kPayload);
  EXPECT_EQ(base64_bytes(job["job"]["last_error"]), error);
  ASSERT_EQ(job["job"]["errors"].size(), 1U) << job;
  EXPECT_EQ(base64_bytes(job["job"]["errors"][0]["reason"]), "asked to fail: " + kPayload);

  const auto listed = run_dueq(cluster.endpoint(), "dead list --queue bytes --json", false);
  ASSERT_EQ(listed.code, 0) << listed.out;
  const json cli_dead = json::parse(listed.out, nullptr, false);
  ASSERT_FALSE(cli_dead.is_discarded()) << listed.out;
  EXPECT_EQ(base64_bytes(cli_dead["rows"][0]["last_error"]), error);
  EXPECT_EQ(cli_dead["rows"][0], dead["rows"][0]) << "one document in every view";

  const auto shown = run_dueq(cluster.endpoint(), "job bad-1 --queue bytes --json", false);
  ASSERT_EQ(shown.code, 0) << shown.out;
  const json cli_job = json::parse(shown.out, nullptr, false);
  ASSERT_FALSE(cli_job.is_discarded()) << shown.out;
  EXPECT_EQ(base64_bytes(cli_job["payload"]), kPayload);
  EXPECT_EQ(base64_bytes(cli_job["last_error"]), error);
  EXPECT_EQ(cli_job["id"], "bad-1") << "UTF-8 stays a JSON string";
  EXPECT_EQ(cli_job, job["job"]) << "one document in every view";
}

// The worker a failure is charged to is part of the job's document, with
// any bytes in its id and in the error, tabs and newlines included.
TEST(AnyBytes, AJobsErrorsNameTheirWorkerWhateverBytesItsIdHolds) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  const std::string id("w\xff\t\n\\x", 6);
  RawPeer peer(cluster.endpoint(), id);
  peer.send(proto::Hello{id, {"odd"}, 1, {}, "host", 1});
  auto welcome = peer.receive();
  ASSERT_TRUE(welcome && std::holds_alternative<proto::Welcome>(*welcome));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"odd", "t", "", "job-1", 0, 1}));
  std::optional<proto::Task> task;
  for (int i = 0; i < 20 && !task; ++i) {
    auto frame = peer.receive();
    if (frame && std::holds_alternative<proto::Tasks>(*frame)) task = std::get<proto::Tasks>(*frame).items.at(0);
  }
  ASSERT_TRUE(task) << "the job reached the raw worker";
  const std::string error("line one\nline\ttwo \xfe", 19);
  peer.send(proto::Results{{{"odd", "job-1", task->token, proto::Outcome::failed_final, error}}});
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("odd"); return s && s->dead == 1; }, 10s));

  httplib::Client web("127.0.0.1", http);
  const json job = get_json(web, "/api/job?id=job-1&queue=odd");
  ASSERT_TRUE(job.is_object()) << job;
  ASSERT_EQ(job["job"]["errors"].size(), 1U) << job;
  const json& entry = job["job"]["errors"][0];
  EXPECT_EQ(base64_bytes(entry["worker"]), id);
  EXPECT_EQ(base64_bytes(entry["reason"]), error);
  EXPECT_EQ(entry["attempt"], 1);
  EXPECT_TRUE(entry["at_ms"].is_number_integer()) << entry;
  EXPECT_EQ(job["job"]["state"], "dead");
  const auto shown = run_dueq(cluster.endpoint(), "job job-1 --queue odd", false);
  EXPECT_EQ(shown.code, 0) << shown.out;
  EXPECT_NE(shown.out.find("attempt 1"), std::string::npos) << shown.out;
}

TEST(AnyBytes, AWorkerIdThatIsNotUtf8IsShownInTheOverview) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  const std::string id("w\xff\xfe\xc0\xaf", 5);  // \xc0\xaf: an overlong '/'
  RawPeer peer(cluster.endpoint(), "odd-worker");
  peer.send(proto::Hello{id, {"bytes"}, 4, {}, "host", 1});
  auto welcome = peer.receive();
  ASSERT_TRUE(welcome && std::holds_alternative<proto::Welcome>(*welcome));
  httplib::Client web("127.0.0.1", http);
  json found;
  ASSERT_TRUE(eventually([&] {
    const json overview = get_json(web, "/api/overview");
    if (!overview.is_object()) return false;
    for (const auto& w : overview["workers"])
      if (w["id"].is_object()) found = w["id"];
    return !found.is_null();
  }, 10s));
  EXPECT_EQ(base64_bytes(found), id);
}

TEST(AnyBytes, ACronEntryWithAPayloadThatIsNotUtf8IsKeptAndItsTicksCarryIt) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  const std::string payload("\xff\xfe x\x80", 5);
  // Given through the shell as octal escapes: printf writes the raw bytes.
  const auto added = run_dueq(cluster.endpoint(),
                              "cron add odd --schedule '* * * * * *' --queue ticks --type noop "
                              "--payload \"$(printf '\\377\\376 x\\200')\"");
  ASSERT_EQ(added.code, 0) << added.out;
  ASSERT_TRUE(cluster.broker().running()) << "the broker lives on";
  const auto listed = run_dueq(cluster.endpoint(), "cron list --json", false);
  ASSERT_EQ(listed.code, 0) << listed.out;
  EXPECT_FALSE(json::parse(listed.out, nullptr, false).is_discarded()) << listed.out;

  // No worker takes the ticks: they wait in the queue, each with the payload.
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("ticks"); return s && s->waiting + s->scheduled >= 2; }, 20s));
  httplib::Client web("127.0.0.1", http);
  const json scheduled = get_json(web, "/api/scheduled?queue=ticks&limit=5");
  ASSERT_TRUE(scheduled.is_object() && !scheduled["rows"].empty()) << scheduled;
  const std::string tick_id = scheduled["rows"][0]["id"].get<std::string>();
  EXPECT_TRUE(tick_id.starts_with("odd@")) << tick_id;
  const json job = get_json(web, "/api/job?queue=ticks&id=" + tick_id);
  ASSERT_TRUE(job.is_object()) << job;
  EXPECT_EQ(base64_bytes(job["job"]["payload"]), payload);
  EXPECT_TRUE(cluster.broker().running());
}
