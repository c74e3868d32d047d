// Flows and batches end to end (docs/flows.md): a real broker, Redis and
// example workers. A parent starts only after every child settled, and
// reads their results; a failed child fails it; a batch's callbacks run
// once, after every member; the CLI shows them; a broker killed while
// children run loses and repeats nothing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include <zmq.hpp>

#include "common/protocol.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

JobSpec echo(std::string id, std::string payload) {
  return JobSpec{.queue = "q", .type = "echo", .payload = std::move(payload), .id = std::move(id)};
}

// The jobs the example worker started, by id: their start times (µs).
std::map<std::string, std::vector<int64_t>> starts(const std::string& record) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& r : read_records(record)) out[r.id].push_back(r.start_us);
  return out;
}

JobEnd wait_end(Client& client, const std::string& id) {
  auto end = client.wait(id, "q", 30s);
  EXPECT_TRUE(end) << (end ? "" : end.error().message);
  return end ? *end : JobEnd{};
}

}  // namespace

TEST(Flows, AParentRunsOnceAfterItsChildrenAndReadsTheirResults) {
  Cluster cluster;
  const std::string record = (cluster.dir() / "starts.log").string();
  cluster.start_example_worker("q", 4, record);
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  FlowJob root{echo("report", "merged"), ChildFailure::fail_parent,
               {FlowJob{echo("shard-a", "result a"), ChildFailure::fail_parent, {FlowJob{echo("shard-a1", "deep"), ChildFailure::ignore, {}}}},
                FlowJob{echo("shard-b", std::string("b\xff\x00", 3)), ChildFailure::proceed, {}}}};
  auto put = client.enqueue_flow("q", root);
  ASSERT_TRUE(put) << put.error().message;
  ASSERT_EQ(put->status, GroupResult::Status::accepted) << put->reason;
  EXPECT_EQ(put->ids, (std::vector<std::string>{"report", "shard-a", "shard-a1", "shard-b"}));
  EXPECT_EQ(wait_end(client, "report").state, JobEnd::State::done);

  auto started = starts(record);
  ASSERT_EQ(started["report"].size(), 1u) << "the parent ran once";
  for (const char* child : {"shard-a", "shard-a1", "shard-b"}) {
    ASSERT_EQ(started[child].size(), 1u) << child;
    EXPECT_LT(started[child][0], started["report"][0]) << child << " started after its parent";
  }
  EXPECT_LT(started["shard-a1"][0], started["shard-a"][0]) << "a grandchild runs before its parent";
  // A parent's handler reads its children and their results, any bytes.
  auto children = client.children("q", "report");
  ASSERT_TRUE(children) << children.error().message;
  EXPECT_EQ(children->kind, "flow");
  EXPECT_EQ(children->state, "settled");
  EXPECT_EQ(children->done, 2);
  std::map<std::string, std::pair<std::string, std::string>> by_id;
  for (const auto& m : children->members) by_id[m.id] = {m.state, m.result};
  EXPECT_EQ(by_id["shard-a"], std::make_pair(std::string("done"), std::string("result a")));
  EXPECT_EQ(by_id["shard-b"], std::make_pair(std::string("done"), std::string("b\xff\x00", 3)));
  EXPECT_EQ(by_id.size(), 2u) << "only its own children, not its grandchild";
  // A retry of the same flow is a duplicate, and runs nothing again.
  auto again = client.enqueue_flow("q", root);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, GroupResult::Status::duplicate);
  EXPECT_EQ(again->job_index, 0);
}

TEST(Flows, AFailedChildFailsItsParentWhichNeverRuns) {
  Cluster cluster;
  const std::string record = (cluster.dir() / "starts.log").string();
  cluster.start_example_worker("q", 4, record);
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  JobSpec bad{.queue = "q", .type = "fail", .payload = "no disk", .id = "shard", .max_attempts = 1};
  auto put = client.enqueue_flow("q", FlowJob{echo("parent", ""), ChildFailure::fail_parent, {FlowJob{bad, ChildFailure::fail_parent, {}}}});
  ASSERT_TRUE(put && put->status == GroupResult::Status::accepted);
  const auto end = wait_end(client, "parent");
  EXPECT_EQ(end.state, JobEnd::State::dead);
  EXPECT_EQ(end.error, "child shard dead: attempts exhausted (1): asked to fail: no disk");
  EXPECT_FALSE(starts(record).contains("parent"));
  // `dueq job` and `dueq flow children` show it.
  auto job = run_dueq(cluster.endpoint(), "job parent");
  EXPECT_NE(job.out.find("children:     dueq flow children q parent"), std::string::npos) << job.out;
  auto children = run_dueq(cluster.endpoint(), "flow children q parent");
  EXPECT_EQ(children.code, 0) << children.out;
  EXPECT_NE(children.out.find("flow parent parent in q: failed"), std::string::npos) << children.out;
  EXPECT_NE(children.out.find("asked to fail: no disk"), std::string::npos) << children.out;
}

TEST(Flows, AHeldParentShowsItsStateAndCancellingItCancelsItsWaitingChildren) {
  Cluster cluster;
  Client client(cluster.endpoint());
  JobSpec later = echo("later", "");
  later.due_ms = Client::in_ms(3'600'000);
  ASSERT_TRUE(client.enqueue_flow("q", FlowJob{echo("top", ""), ChildFailure::fail_parent, {FlowJob{later, ChildFailure::ignore, {}}}}));
  auto doc = client.job_document("top", "q");
  ASSERT_TRUE(doc && *doc);
  EXPECT_EQ((*doc)->state, "held");
  EXPECT_TRUE((*doc)->has_children);
  auto child = client.job_document("later", "q");
  ASSERT_TRUE(child && *child);
  EXPECT_EQ((*child)->parent, "top");
  auto json = run_dueq(cluster.endpoint(), "job top --json");
  EXPECT_NE(json.out.find("\"state\":\"held\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"has_children\":true"), std::string::npos) << json.out;
  // Not rescheduled around its children.
  auto now = client.run_now("top", "q");
  ASSERT_FALSE(now);
  EXPECT_EQ(now.error().code, "conflict") << now.error().message;
  auto cancelled = run_dueq(cluster.endpoint(), "cancel top");
  EXPECT_EQ(cancelled.code, 0) << cancelled.out;
  auto gone = client.job_document("later", "q");
  ASSERT_TRUE(gone && *gone);
  EXPECT_EQ((*gone)->state, "cancelled");
}

TEST(Batches, CallbacksRunOnceAfterEveryMemberAndTheStatusCountsThem) {
  Cluster cluster;
  const std::string record = (cluster.dir() / "starts.log").string();
  cluster.start_example_worker("q", 4, record);
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  std::vector<JobSpec> first;
  for (int i = 0; i < 3; ++i) first.push_back(echo(fmt::format("m{}", i), ""));
  auto opened = client.open_batch("q", "import-7", BatchCallbacks{echo("all-good", ""), echo("all-over", "")}, first);
  ASSERT_TRUE(opened) << opened.error().message;
  ASSERT_EQ(opened->status, GroupResult::Status::accepted) << opened->reason;
  JobSpec failing{.queue = "q", .type = "fail", .payload = "bad row", .id = "m3", .max_attempts = 1};
  ASSERT_EQ(client.add_to_batch("q", "import-7", {failing, echo("m4", "")})->status, GroupResult::Status::accepted);
  // Every member can settle; the callbacks wait for the close.
  ASSERT_TRUE(eventually([&] {
    auto s = client.batch_status("q", "import-7");
    return s && s->pending == 0;
  }, 30s));
  EXPECT_FALSE(starts(record).contains("all-over"));
  auto open = run_dueq(cluster.endpoint(), "batch status q import-7");
  EXPECT_NE(open.out.find("(open: it takes more members)"), std::string::npos) << open.out;
  auto closed = run_dueq(cluster.endpoint(), "batch close q import-7");
  EXPECT_EQ(closed.code, 0) << closed.out;
  EXPECT_EQ(wait_end(client, "all-over").state, JobEnd::State::done);
  EXPECT_EQ(wait_end(client, "all-good").state, JobEnd::State::cancelled) << "a member died: no success callback";
  auto s = client.batch_status("q", "import-7", "", 100);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "settled");
  EXPECT_EQ(s->total, 5);
  EXPECT_EQ(s->done, 4);
  EXPECT_EQ(s->dead, 1);
  EXPECT_EQ(s->members.size(), 5u);
  auto started = starts(record);
  ASSERT_EQ(started["all-over"].size(), 1u);
  for (int i = 0; i < 5; ++i) EXPECT_LT(started[fmt::format("m{}", i)].at(0), started["all-over"][0]);
  EXPECT_EQ(client.add_to_batch("q", "import-7", {echo("m5", "")})->status, GroupResult::Status::batch_closed);
  EXPECT_EQ(client.close_batch("q", "nope")->status, GroupResult::Status::no_batch);
}

TEST(Flows, BadFlowsAreRefusedWholeWithAClearReason) {
  Cluster cluster;
  Client client(cluster.endpoint());
  FlowJob deep{echo("l1", "")};
  FlowJob* at = &deep;
  for (int level = 2; level <= 5; ++level) {
    at->children.push_back(FlowJob{echo(fmt::format("l{}", level), "")});
    at = &at->children.back();
  }
  auto refused = client.enqueue_flow("q", deep);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, GroupResult::Status::rejected);
  EXPECT_EQ(refused->job_index, 4);
  EXPECT_NE(refused->reason.find("at most 4 levels"), std::string::npos) << refused->reason;
  JobSpec unique = echo("u", "");
  unique.unique_key = "k";
  unique.unique_until = UniqueUntil::done;
  auto with_unique = client.enqueue_flow("q", FlowJob{echo("p", ""), ChildFailure::fail_parent, {FlowJob{unique}}});
  ASSERT_TRUE(with_unique);
  EXPECT_EQ(with_unique->status, GroupResult::Status::rejected);
  JobSpec bad_type = echo("t", "");
  bad_type.type = "";
  auto with_bad_job = client.enqueue_flow("q", FlowJob{echo("p2", ""), ChildFailure::fail_parent, {FlowJob{bad_type}}});
  ASSERT_TRUE(with_bad_job);
  EXPECT_EQ(with_bad_job->status, GroupResult::Status::rejected);
  EXPECT_EQ(with_bad_job->job_index, 1);
  for (const char* id : {"l1", "p", "u", "p2"}) {
    auto doc = client.job_document(id, "q");
    ASSERT_TRUE(doc);
    EXPECT_FALSE(*doc) << id << " was stored";
  }
  // Past the size limit the client refuses it before sending; a raw frame
  // is refused by the broker, and a healthy producer is served beside it.
  FlowJob wide{echo("w", "")};
  for (int i = 0; i < 1000; ++i) wide.children.push_back(FlowJob{echo(fmt::format("w{}", i), "")});
  auto too_big = client.enqueue_flow("q", wide);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code, "bad_argument");
  zmq::context_t context;
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.connect(cluster.endpoint());
  proto::GroupEnqueue frame{77, "q", "", proto::BatchAction::none, false, {}};
  for (int i = 0; i <= 1000; ++i) frame.jobs.push_back(proto::GroupJob{proto::NewJob{"q", fmt::format("r{}", i), "echo"}});
  const std::string bytes = proto::encode(frame);
  raw.send(zmq::buffer(bytes));
  zmq::message_t answer;
  raw.set(zmq::sockopt::rcvtimeo, 10'000);
  ASSERT_TRUE(raw.recv(answer));
  auto decoded = proto::decode(std::string_view(static_cast<const char*>(answer.data()), answer.size()));
  ASSERT_TRUE(decoded);
  auto* error = std::get_if<proto::ErrorFrame>(&*decoded);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(error->message.find("exceeds the limit 1000"), std::string::npos) << error->message;
  EXPECT_TRUE(client.enqueue_flow("q", FlowJob{echo("fine", "")}).has_value());
  auto doc = client.job_document("r0", "q");
  ASSERT_TRUE(doc);
  EXPECT_FALSE(*doc);
}

// The broker SIGKILLed while a flow's children run: a new broker finishes
// the flow, the parent runs exactly once, and no child is lost.
TEST(Flows, ABrokerKilledWhileChildrenRunLosesAndRepeatsNothing) {
  Cluster cluster;
  const std::string record = (cluster.dir() / "starts.log").string();
  cluster.start_example_worker("q", 8, record);
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 2'000, .attempts = 10});
  FlowJob root{echo("root", "")};
  for (int i = 0; i < 8; ++i)
    root.children.push_back(FlowJob{JobSpec{.queue = "q", .type = "sleep_quiet", .payload = "400", .id = fmt::format("c{}", i)}});
  ASSERT_EQ(client.enqueue_flow("q", root)->status, GroupResult::Status::accepted);
  ASSERT_TRUE(eventually([&] { return starts(record).size() >= 4; }, 20s));
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait();
  cluster.start_broker();
  EXPECT_EQ(wait_end(client, "root").state, JobEnd::State::done);
  auto started = starts(record);
  EXPECT_EQ(started["root"].size(), 1u) << "the parent ran once";
  for (int i = 0; i < 8; ++i) EXPECT_GE(started[fmt::format("c{}", i)].size(), 1u) << "child " << i << " ran";
  auto view = client.children("q", "root");
  ASSERT_TRUE(view);
  EXPECT_EQ(view->done, 8);
}
