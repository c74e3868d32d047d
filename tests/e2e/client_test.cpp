// The producer client library: thread-safe, many requests outstanding on one
// connection, each answered by its own reply, resent and then failed when
// unanswered. A ROUTER socket in the test stands in for the broker where the
// rule is about what the client sends; a real cluster where it is about jobs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <zmq.hpp>

#include "common/protocol.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

// A bound ROUTER that reads the client's frames and answers when told.
class FakeBroker {
 public:
  FakeBroker() : socket_(context_, zmq::socket_type::router), port_(free_port()) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind(endpoint());
  }
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

  struct Received {
    std::string routing_id;
    proto::Frame frame;
  };
  std::optional<Received> receive(std::chrono::milliseconds timeout = 5s) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) != 1) return std::nullopt;
    zmq::message_t routing_id, body;
    if (!socket_.recv(routing_id) || !socket_.recv(body)) return std::nullopt;
    auto frame = proto::decode(std::string_view(static_cast<const char*>(body.data()), body.size()));
    if (!frame) return std::nullopt;
    return Received{routing_id.to_string(), std::move(*frame)};
  }
  template <typename T>
  void reply(const std::string& routing_id, const T& frame) {
    socket_.send(zmq::buffer(routing_id), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(proto::encode(frame)));
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
  int port_;
};

}  // namespace

TEST(Client, KeepsManyRequestsOutstandingOnOneConnectionAndMatchesRepliesById) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 1});
  constexpr int kRequests = 100;
  std::vector<std::future<std::expected<EnqueueResult, ClientError>>> pending;
  for (int i = 0; i < kRequests; ++i)
    pending.push_back(client.enqueue_async({"q", "t", "p", fmt::format("job-{}", i), 0, 0}));

  // Every request reaches the broker before any is answered, all on one connection.
  std::vector<std::pair<uint64_t, std::string>> requests;  // (request id, job id)
  std::set<std::string> routing_ids;
  std::string routing_id;
  for (int i = 0; i < kRequests; ++i) {
    auto received = broker.receive();
    ASSERT_TRUE(received) << "only " << i << " requests arrived";
    auto* enqueue = std::get_if<proto::Enqueue>(&received->frame);
    ASSERT_NE(enqueue, nullptr);
    ASSERT_EQ(enqueue->jobs.size(), 1u);
    requests.emplace_back(enqueue->request_id, enqueue->jobs[0].id);
    routing_ids.insert(received->routing_id);
    routing_id = received->routing_id;
  }
  EXPECT_EQ(routing_ids.size(), 1u) << "one connection";
  for (const auto& f : pending) EXPECT_EQ(f.wait_for(0ms), std::future_status::timeout) << "nothing answered yet";

  // Answered in reverse order, each future gets the reply naming its request.
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
    const auto status = it->second == "job-7" ? proto::EnqueueStatus::duplicate : proto::EnqueueStatus::accepted;
    broker.reply(routing_id, proto::EnqueueReply{it->first, {proto::EnqueueOutcome{it->second, static_cast<uint8_t>(status), ""}}, 0});
  }
  for (int i = 0; i < kRequests; ++i) {
    auto result = pending[i].get();
    ASSERT_TRUE(result) << result.error().message;
    EXPECT_EQ(result->id, fmt::format("job-{}", i));
    EXPECT_EQ(result->status, i == 7 ? EnqueueResult::Status::duplicate : EnqueueResult::Status::accepted);
  }
}

TEST(Client, AnUnansweredRequestIsSentAgainUnderItsIdThenFailsWithTimeout) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 300, .attempts = 3});
  auto pending = client.enqueue_async({"q", "t", "p", "the-job", 0, 0});
  std::set<uint64_t> request_ids;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto received = broker.receive();
    ASSERT_TRUE(received) << "attempt " << attempt + 1 << " never arrived";
    auto* enqueue = std::get_if<proto::Enqueue>(&received->frame);
    ASSERT_NE(enqueue, nullptr);
    EXPECT_EQ(enqueue->jobs.at(0).id, "the-job") << "a resend names the same job";
    request_ids.insert(enqueue->request_id);
  }
  EXPECT_EQ(request_ids.size(), 1u) << "a resend is the same request";
  auto result = pending.get();
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, "timeout");
  EXPECT_FALSE(broker.receive(600ms)) << "no fourth attempt";
}

TEST(Client, DestroyingTheClientAnswersItsPendingRequests) {
  FakeBroker broker;
  std::future<std::expected<EnqueueResult, ClientError>> pending;
  {
    Client client(broker.endpoint(), ClientOptions{.timeout_ms = 60'000, .attempts = 1});
    pending = client.enqueue_async({"q", "t", "p", "", 0, 0});
    ASSERT_TRUE(broker.receive());
  }
  ASSERT_EQ(pending.wait_for(5s), std::future_status::ready) << "a pending request outlived its client";
  auto result = pending.get();
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, "unavailable");
}

TEST(Client, ThreadsSharingOneClientHaveEveryJobAcceptedOnce) {
  Cluster cluster;
  Client client(cluster.endpoint());
  constexpr int kThreads = 8, kPerThread = 250;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto r = client.enqueue({"shared", "noop", "", "", Client::in_ms(3'600'000), 0});
        if (r && r->status == EnqueueResult::Status::accepted) ids[t].push_back(r->id);
      }
    });
  for (auto& t : threads) t.join();
  std::set<std::string> distinct;
  for (const auto& v : ids) distinct.insert(v.begin(), v.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kThreads * kPerThread));
  auto stats = cluster.stats("shared");
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->accepted, kThreads * kPerThread);
  EXPECT_EQ(stats->scheduled, kThreads * kPerThread);
}
