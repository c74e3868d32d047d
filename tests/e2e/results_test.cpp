// Results and waiting for them (docs/jobs.md, "Results and waiting"): a
// handler's result is kept with the done job, and Client::wait and `dueq
// wait` return a job's end - done with its result, dead with why,
// cancelled - also across a broker restart and a take-over. A result over
// 64 KiB kills its job with why; a peer that asks for too many waits is
// refused past its share while a healthy client's wait is answered.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <future>
#include <thread>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/raw_peer.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;
using nlohmann::json;

TEST(Results, AHandlersResultIsKeptWithTheDoneJobAndWaitReturnsIt) {
  Cluster cluster;
  cluster.start_example_worker("r", 2, (cluster.dir() / "starts.txt").string());
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "x", "--exec",
                        "t=printf 'from exec %s' \"$DUEQ_JOB_ID\" > \"$DUEQ_RESULT_FILE\""});
  ASSERT_TRUE(cluster.wait_for_workers(2));
  Client client(cluster.endpoint());
  const std::string bytes("ok\0\xff\n", 5);
  ASSERT_TRUE(client.enqueue({.queue = "r", .type = "echo", .payload = bytes, .id = "echo-1", .due_ms = Client::in_ms(300)}));
  auto end = client.wait("echo-1", "r", 10s);
  ASSERT_TRUE(end) << end.error().message;
  EXPECT_EQ(end->state, JobEnd::State::done);
  EXPECT_EQ(end->result, bytes);
  EXPECT_GT(end->finished_ms, 0);

  // Kept: the lookup shows it, a wait after the end returns it, and so does `dueq wait`.
  auto doc = client.job_document("echo-1", "r");
  ASSERT_TRUE(doc && *doc);
  ASSERT_TRUE((*doc)->result.has_value());
  EXPECT_EQ(*(*doc)->result, bytes);
  const auto shown = run_dueq(cluster.endpoint(), "job echo-1 --queue r --json", false);
  EXPECT_EQ(json::parse(shown.out)["result"], (json{{"encoding", "base64"}, {"data", "b2sA/wo="}})) << shown.out;
  auto again = client.wait("echo-1", "r", 1s);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->result, bytes);
  const auto waited = run_dueq(cluster.endpoint(), "wait echo-1 --queue r", false);
  EXPECT_EQ(waited.code, 0);
  EXPECT_EQ(waited.out, bytes);

  // An exec handler writes its result to $DUEQ_RESULT_FILE.
  ASSERT_TRUE(client.enqueue({.queue = "x", .type = "t", .id = "exec-1"}));
  const auto exec = run_dueq(cluster.endpoint(), "wait exec-1 --queue x --for 10s --json", false);
  ASSERT_EQ(exec.code, 0) << exec.out;
  EXPECT_EQ(json::parse(exec.out)["result"], "from exec exec-1");
  EXPECT_EQ(json::parse(exec.out)["state"], "done");

  // A job whose handler returned nothing is done with an empty result, and its document has none.
  ASSERT_TRUE(client.enqueue({.queue = "r", .type = "noop", .id = "plain-1"}));
  auto plain = client.wait("plain-1", "r", 10s);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->state, JobEnd::State::done);
  EXPECT_EQ(plain->result, "");
  auto plain_doc = client.job_document("plain-1", "r");
  ASSERT_TRUE(plain_doc && *plain_doc);
  EXPECT_FALSE((*plain_doc)->result.has_value());
}

TEST(Results, AWaitReturnsDeadWithWhyCancelledUnknownAndPending) {
  Cluster cluster;
  cluster.start_example_worker("w", 2, (cluster.dir() / "starts.txt").string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "w", .type = "fail", .payload = "on purpose", .id = "dies", .max_attempts = 1}));
  auto dead = client.wait("dies", "w", 10s);
  ASSERT_TRUE(dead) << dead.error().message;
  EXPECT_EQ(dead->state, JobEnd::State::dead);
  EXPECT_NE(dead->error.find("asked to fail: on purpose"), std::string::npos) << dead->error;
  const auto cli_dead = run_dueq(cluster.endpoint(), "wait dies --queue w", true);
  EXPECT_EQ(cli_dead.code, 1) << cli_dead.out;
  EXPECT_NE(cli_dead.out.find("is dead: attempts exhausted (1): asked to fail: on purpose"), std::string::npos) << cli_dead.out;

  // Cancelled while waited for: answered as the cancel lands.
  ASSERT_TRUE(client.enqueue({.queue = "w", .type = "noop", .id = "later", .due_ms = Client::in_ms(3'600'000)}));
  auto waiting = std::async(std::launch::async, [&] {
    Client waiter(cluster.endpoint());
    return waiter.wait("later", "w", 20s);
  });
  ASSERT_EQ(waiting.wait_for(300ms), std::future_status::timeout) << "answered before the job ended";
  ASSERT_EQ(run_dueq(cluster.endpoint(), "cancel later --queue w").code, 0);
  auto cancelled = waiting.get();
  ASSERT_TRUE(cancelled);
  EXPECT_EQ(cancelled->state, JobEnd::State::cancelled);

  auto unknown = client.wait("nobody", "w", 5s);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->state, JobEnd::State::unknown);
  EXPECT_EQ(run_dueq(cluster.endpoint(), "wait nobody --queue w", true).code, 3);

  ASSERT_TRUE(client.enqueue({.queue = "w", .type = "noop", .id = "far", .due_ms = Client::in_ms(3'600'000)}));
  auto pending = client.wait("far", "w", 200ms);
  ASSERT_TRUE(pending);
  EXPECT_EQ(pending->state, JobEnd::State::pending);
  const auto cli_pending = run_dueq(cluster.endpoint(), "wait far --queue w --for 300ms", true);
  EXPECT_EQ(cli_pending.code, 75) << cli_pending.out;
  EXPECT_NE(cli_pending.out.find("has not ended after 300ms"), std::string::npos) << cli_pending.out;

  // Bad input: a usage error.
  for (const char* bad : {"wait far", "wait --queue w", "wait far --queue w --for soon", "wait far --queue w --for 8d",
                          "wait 'f r' --queue w"})
    EXPECT_EQ(run_dueq(cluster.endpoint(), bad, true).code, 2) << bad;
}

// A result over 64 KiB is refused: its job goes dead with why (the worker
// library says so before sending; a worker that sends one anyway meets
// the same at the broker). 64 KiB exactly is kept.
TEST(Results, AResultOverTheLimitKillsItsJobWithWhy) {
  Cluster cluster;
  cluster.start_example_worker("big", 1, (cluster.dir() / "starts.txt").string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  const std::string limit(size_t{64} * 1024, 'r');
  ASSERT_TRUE(client.enqueue({.queue = "big", .type = "echo", .payload = limit, .id = "at-limit"}));
  ASSERT_TRUE(client.enqueue({.queue = "big", .type = "echo", .payload = limit + "!", .id = "over", .max_attempts = 3}));
  auto kept = client.wait("at-limit", "big", 10s);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->state, JobEnd::State::done);
  EXPECT_EQ(kept->result.size(), limit.size());
  auto over = client.wait("over", "big", 10s);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->state, JobEnd::State::dead);
  EXPECT_EQ(over->error, "its result of 65537 bytes is over the 65536-byte limit");

  // A hand-made worker sends a result over the limit: the broker kills the job with why.
  ASSERT_TRUE(client.enqueue({.queue = "raw", .type = "t", .id = "raw-over"}));
  RawPeer peer(cluster.endpoint(), "raw-worker");
  peer.send(proto::Hello{"raw-worker", {"raw"}, 1, {}, "host", 1});
  std::optional<proto::Task> task;
  for (int i = 0; i < 20 && !task; ++i) {
    auto frame = peer.receive();
    ASSERT_TRUE(frame) << "no task";
    if (auto* tasks = std::get_if<proto::Tasks>(&*frame)) {
      peer.send(proto::Received{tasks->seq});
      task = tasks->items.at(0);
    }
  }
  ASSERT_TRUE(task);
  peer.send(proto::Results{{{"raw", "raw-over", task->token, proto::Outcome::done, "", 0, proto::Bytes{std::string(70'000, 'x')}}}});
  auto raw = client.wait("raw-over", "raw", 10s);
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->state, JobEnd::State::dead);
  EXPECT_EQ(raw->error, "its result of 70000 bytes is over the 65536-byte limit");
}

// A wait outlives the broker it was sent to: killed and started again, the
// broker finds the end the job reached meanwhile, or answers it as it comes;
// with a standby, the one that takes over answers.
TEST(Results, AWaitGoesOnAcrossABrokerRestartAndATakeOver) {
  Cluster cluster;
  // The worker knows the standby started later too.
  const std::string standby_endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
  const std::string both = cluster.endpoint() + "," + standby_endpoint;
  cluster.start_worker({bin("dueq-example-worker"), "--broker", both, "--queue", "ha", "--concurrency", "2"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  // Due after the broker is back: the end comes to the new run.
  ASSERT_TRUE(client.enqueue({.queue = "ha", .type = "echo", .payload = "after", .id = "restart-1", .due_ms = Client::in_ms(2'500)}));
  auto waiting = std::async(std::launch::async, [&] {
    Client waiter(cluster.endpoint(), ClientOptions{.timeout_ms = 1000});
    return waiter.wait("restart-1", "ha", 30s);
  });
  ASSERT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait(10s);
  cluster.start_broker();
  auto end = waiting.get();
  ASSERT_TRUE(end) << end.error().message;
  EXPECT_EQ(end->state, JobEnd::State::done);
  EXPECT_EQ(end->result, "after");

  // A standby beside the leader; the leader is killed while the wait runs.
  Process standby({bin("dueq-broker"), "--redis", cluster.redis().url(), "--listen", standby_endpoint, "--log-level", "info"},
                  (cluster.dir() / "standby.log").string());
  ASSERT_TRUE(eventually([&] { return read_file(cluster.dir() / "standby.log").find("standing by") != std::string::npos; }, 20s));
  ASSERT_TRUE(client.enqueue({.queue = "ha", .type = "echo", .payload = "taken over", .id = "takeover-1", .due_ms = Client::in_ms(4'000)}));
  auto across = std::async(std::launch::async, [&] {
    Client waiter(both, ClientOptions{.timeout_ms = 1000});
    return waiter.wait("takeover-1", "ha", 40s);
  });
  ASSERT_EQ(across.wait_for(300ms), std::future_status::timeout);
  cluster.broker().signal(SIGKILL);
  cluster.broker().wait(10s);
  auto taken = across.get();
  ASSERT_TRUE(taken) << taken.error().message;
  EXPECT_EQ(taken->state, JobEnd::State::done);
  EXPECT_EQ(taken->result, "taken over");
  EXPECT_NE(read_file(cluster.dir() / "standby.log").find("leading with epoch"), std::string::npos);
}

// One connection may hold 1,000 waits: the next is answered "overloaded",
// and a healthy client's wait beside it is answered at the job's end.
TEST(Results, APeerAskingForTooManyWaitsIsRefusedPastItsShare) {
  Cluster cluster;
  cluster.start_example_worker("q", 1, (cluster.dir() / "starts.txt").string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "q", .type = "noop", .id = "never", .due_ms = Client::in_ms(3'600'000)}));
  RawPeer greedy(cluster.endpoint(), "greedy");
  for (uint64_t i = 1; i <= 1'001; ++i) greedy.send(proto::WaitRequest{i, "q", "never", 60'000});
  std::optional<proto::ErrorFrame> refused;
  while (auto frame = greedy.receive(10s)) {
    if (auto* error = std::get_if<proto::ErrorFrame>(&*frame)) {
      refused = *error;
      break;
    }
  }
  ASSERT_TRUE(refused) << "the 1,001st wait was answered";
  EXPECT_EQ(refused->code, "overloaded");
  EXPECT_EQ(refused->request_id, 1'001u);
  ASSERT_TRUE(client.enqueue({.queue = "q", .type = "echo", .payload = "healthy", .id = "healthy-1"}));
  auto end = client.wait("healthy-1", "q", 10s);
  ASSERT_TRUE(end) << end.error().message;
  EXPECT_EQ(end->state, JobEnd::State::done);
  EXPECT_EQ(end->result, "healthy");
  EXPECT_TRUE(cluster.broker().running());
}
