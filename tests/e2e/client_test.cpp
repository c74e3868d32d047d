// The producer client library: thread-safe, many requests outstanding on one
// connection, each answered by its own reply, resent and then failed when
// unanswered. A ROUTER socket in the test stands in for the broker where the
// rule is about what the client sends; a real cluster where it is about jobs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "common/protocol.hpp"
#include "tests/support/fake_broker.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;


namespace {

// Receives frames until they hold `jobs` jobs; each frame's request id and job ids.
std::vector<std::pair<uint64_t, std::vector<std::string>>> receive_jobs(FakeBroker& broker, size_t jobs,
                                                                        std::string& routing_id,
                                                                        std::set<std::string>& routing_ids) {
  std::vector<std::pair<uint64_t, std::vector<std::string>>> frames;
  for (size_t seen = 0; seen < jobs;) {
    auto received = broker.receive();
    if (!received) {
      ADD_FAILURE() << "only " << seen << " jobs arrived";
      break;
    }
    auto* enqueue = std::get_if<proto::Enqueue>(&received->frame);
    if (enqueue == nullptr) {
      ADD_FAILURE() << "not an enqueue";
      break;
    }
    std::vector<std::string> ids;
    for (const auto& job : enqueue->jobs) ids.push_back(job.id);
    seen += ids.size();
    frames.emplace_back(enqueue->request_id, std::move(ids));
    routing_ids.insert(received->routing_id);
    routing_id = received->routing_id;
  }
  return frames;
}

// `count` single-job enqueue_async calls, jobs "job-0".. in order.
std::vector<std::future<std::expected<EnqueueResult, ClientError>>> enqueue_many(Client& client, int count) {
  std::vector<std::future<std::expected<EnqueueResult, ClientError>>> pending;
  for (int i = 0; i < count; ++i) pending.push_back(client.enqueue_async({"q", "t", "p", fmt::format("job-{}", i), 0, 0}));
  return pending;
}

}  // namespace

// Requests submitted faster than the I/O thread sends them share a frame:
// each future still gets its own job's outcome.
TEST(Client, KeepsManyRequestsOutstandingOnOneConnectionAndMatchesRepliesById) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 1});
  constexpr int kRequests = 200;
  auto pending = enqueue_many(client, kRequests);

  // Every request reaches the broker before any is answered, all on one connection.
  std::set<std::string> routing_ids;
  std::string routing_id;
  const auto frames = receive_jobs(broker, kRequests, routing_id, routing_ids);
  EXPECT_EQ(routing_ids.size(), 1u) << "one connection";
  std::multiset<std::string> ids;
  for (const auto& [request_id, frame_ids] : frames) ids.insert(frame_ids.begin(), frame_ids.end());
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(ids.count(fmt::format("job-{}", i)), 1u) << "job " << i << " sent once";
  EXPECT_LT(frames.size(), static_cast<size_t>(kRequests)) << "requests waiting together were merged";
  for (const auto& f : pending) EXPECT_EQ(f.wait_for(0ms), std::future_status::timeout) << "nothing answered yet";

  // Answered in reverse order, each future gets the outcome of its own job.
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    proto::EnqueueReply reply{it->first, {}, 0};
    for (const auto& id : it->second) {
      const auto status = id == "job-7" ? proto::EnqueueStatus::duplicate : proto::EnqueueStatus::accepted;
      reply.results.push_back(proto::EnqueueOutcome{id, status, "reason of " + id});
    }
    broker.reply(routing_id, reply);
  }
  for (int i = 0; i < kRequests; ++i) {
    auto result = pending[i].get();
    ASSERT_TRUE(result) << result.error().message;
    EXPECT_EQ(result->id, fmt::format("job-{}", i));
    EXPECT_EQ(result->reason, fmt::format("reason of job-{}", i));
    EXPECT_EQ(result->status, i == 7 ? EnqueueResult::Status::duplicate : EnqueueResult::Status::accepted);
  }
  std::printf("[ figures  ] %d single-job requests went out in %zu frames\n", kRequests, frames.size());
}

// An error answering a merged frame answers every request in it.
TEST(Client, AnErrorAnsweringAMergedFrameReachesEveryRequestInIt) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 1});
  constexpr int kRequests = 200;
  auto pending = enqueue_many(client, kRequests);
  std::set<std::string> routing_ids;
  std::string routing_id;
  const auto frames = receive_jobs(broker, kRequests, routing_id, routing_ids);
  for (const auto& [request_id, frame_ids] : frames)
    broker.reply(routing_id, proto::ErrorFrame{request_id, "unavailable", "Redis refused the write", 250});
  for (int i = 0; i < kRequests; ++i) {
    auto result = pending[i].get();
    ASSERT_FALSE(result) << "job " << i;
    EXPECT_EQ(result.error().code, "unavailable");
    EXPECT_EQ(result.error().retry_after_ms, 250u);
  }
}

// A merged frame holds at most 1 MiB of payload (one larger job goes alone).
TEST(Client, MergedFramesStayWithinOneMebibyteOfPayload) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 1});
  std::vector<std::future<std::expected<EnqueueResult, ClientError>>> pending;
  for (int i = 0; i < 5; ++i)
    pending.push_back(client.enqueue_async({"q", "t", std::string(400'000, 'x'), fmt::format("job-{}", i), 0, 0}));
  std::set<std::string> routing_ids;
  std::string routing_id;
  const auto frames = receive_jobs(broker, 5, routing_id, routing_ids);
  for (const auto& [request_id, ids] : frames) EXPECT_LE(ids.size(), 2u) << "at most two 400 kB jobs share a frame";
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

// A broker that lets a request's only attempt time out is left like one
// that let any attempt lapse: the next request goes to the next endpoint
// (before, a client with one attempt stayed for good with a broker that
// accepts connections and never answers, or one whose packets are dropped).
TEST(Client, ARequestsOnlyAttemptTimingOutSendsTheNextToTheNextBroker) {
  FakeBroker silent, next;
  Client client(silent.endpoint() + "," + next.endpoint(), ClientOptions{.timeout_ms = 300, .attempts = 1});
  auto first = client.enqueue_async({"q", "t", "p", "first", 0, 0});
  ASSERT_TRUE(silent.receive()) << "the first request goes to the first endpoint";
  auto result = first.get();
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, "timeout");
  auto second = client.enqueue_async({"q", "t", "p", "second", 0, 0});
  auto received = next.receive();
  ASSERT_TRUE(received) << "the request after a timeout never reached the next broker";
  auto* enqueue = std::get_if<proto::Enqueue>(&received->frame);
  ASSERT_NE(enqueue, nullptr);
  EXPECT_EQ(enqueue->jobs.at(0).id, "second");
  EXPECT_FALSE(silent.receive(300ms)) << "nothing more to the silent broker";
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

// Callbacks: each runs once, on the client's I/O thread (the same thread for
// all), with the outcome of its own request, answered in any order.
TEST(Client, ACallbackRunsOnceOnTheIOThreadWithItsOwnOutcome) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 1});
  constexpr int kRequests = 50;
  std::mutex mutex;
  std::condition_variable answered_cv;
  std::vector<int> calls(kRequests, 0);
  std::vector<std::string> outcome_ids(kRequests);
  std::set<std::thread::id> callback_threads;
  std::vector<size_t> batch_outcomes;
  int answered = 0;
  for (int i = 0; i < kRequests; ++i)
    client.enqueue_async({"q", "t", "p", fmt::format("job-{}", i), 0, 0}, [&, i](std::expected<EnqueueResult, ClientError> r) {
      std::lock_guard lock(mutex);
      ++calls[i];
      if (r) outcome_ids[i] = r->id;
      callback_threads.insert(std::this_thread::get_id());
      ++answered;
      answered_cv.notify_all();
    });
  client.enqueue_batch_async({{"q", "t", "p", "batch-a", 0, 0}, {"q", "t", "p", "batch-b", 0, 0}},
                             [&](std::expected<std::vector<EnqueueResult>, ClientError> r) {
                               std::lock_guard lock(mutex);
                               if (r) for (const auto& one : *r) batch_outcomes.push_back(one.id == "batch-a" ? 1 : 2);
                               ++answered;
                               answered_cv.notify_all();
                             });
  std::set<std::string> routing_ids;
  std::string routing_id;
  const auto frames = receive_jobs(broker, kRequests + 2, routing_id, routing_ids);
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    proto::EnqueueReply reply{it->first, {}, 0};
    for (const auto& id : it->second) reply.results.push_back({id, proto::EnqueueStatus::accepted, ""});
    broker.reply(routing_id, reply);
  }
  std::unique_lock lock(mutex);
  ASSERT_TRUE(answered_cv.wait_for(lock, 10s, [&] { return answered == kRequests + 1; })) << answered << " answered";
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(calls[i], 1) << "callback " << i;
    EXPECT_EQ(outcome_ids[i], fmt::format("job-{}", i));
  }
  EXPECT_EQ(batch_outcomes, (std::vector<size_t>{1, 2})) << "a batch's callback gets its jobs' outcomes in order";
  EXPECT_EQ(callback_threads.size(), 1u) << "every callback on the one I/O thread";
  EXPECT_FALSE(callback_threads.contains(std::this_thread::get_id()));
}

// A batch the client refuses before sending is answered like any request:
// on the I/O thread, not inside the call (a caller holding a lock its
// callback takes would deadlock).
TEST(Client, ACallbackForARefusedBatchRunsOnTheIOThreadNotInsideTheCall) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 1});
  std::mutex held_by_caller;
  std::promise<std::pair<std::thread::id, std::expected<std::vector<EnqueueResult>, ClientError>>> got;
  {
    std::lock_guard lock(held_by_caller);
    client.enqueue_batch_async({}, [&](std::expected<std::vector<EnqueueResult>, ClientError> r) {
      std::lock_guard callback_lock(held_by_caller);
      got.set_value({std::this_thread::get_id(), std::move(r)});
    });
  }
  auto future = got.get_future();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  auto [thread, result] = future.get();
  EXPECT_NE(thread, std::this_thread::get_id());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, "bad_argument");
  EXPECT_FALSE(broker.receive(300ms)) << "nothing was sent";
}

TEST(Client, AnEmptyCallbackIsRefusedAtTheCall) {
  FakeBroker broker;
  Client client(broker.endpoint());
  EXPECT_THROW(client.enqueue_async({"q", "t", "", "a", 0, 0}, Client::EnqueueCallback{}), std::invalid_argument);
  EXPECT_THROW(client.enqueue_batch_async({{"q", "t", "", "a", 0, 0}}, Client::EnqueueBatchCallback{}),
               std::invalid_argument);
  EXPECT_FALSE(broker.receive(300ms)) << "nothing was sent";
}

// An ERROR the broker could not address to a request (request id 0) fails
// none of the requests 50 threads have outstanding: each gets its own reply.
TEST(Client, AnErrorThatNamesNoRequestFailsNone) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 1});
  constexpr int kThreads = 50;
  std::vector<std::future<std::expected<EnqueueResult, ClientError>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { results[t] = client.enqueue_async({"q", "t", "", fmt::format("job-{}", t), 0, 0}); });
  for (auto& t : threads) t.join();
  std::set<std::string> routing_ids;
  std::string routing_id;
  const auto frames = receive_jobs(broker, kThreads, routing_id, routing_ids);
  broker.reply(routing_id, proto::ErrorFrame{0, "bad_frame", "someone's frame could not be read", 0});
  for (const auto& [request_id, ids] : frames) {
    proto::EnqueueReply reply{request_id, {}, 0};
    for (const auto& id : ids) reply.results.push_back({id, proto::EnqueueStatus::accepted, ""});
    broker.reply(routing_id, reply);
  }
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(results[t].wait_for(10s), std::future_status::ready);
    auto r = results[t].get();
    ASSERT_TRUE(r) << "thread " << t << ": " << r.error().code << " " << r.error().message;
    EXPECT_EQ(r->status, EnqueueResult::Status::accepted);
  }
}

// One caller's mistakes on a Client shared by 50 threads: a lookup of an id
// with a space, an admin op that does not exist, a batch over the broker's
// frame limit. Each is refused on the client with bad_argument, alone; the
// other 49 threads' jobs are all accepted, and nothing bad reached the
// broker. A peer that does send such a lookup is answered under its own
// request id.
TEST(Client, OneCallersBadRequestsFailNoOtherThreadsRequests) {
  Cluster cluster;
  Client client(cluster.endpoint());
  constexpr int kThreads = 50, kPerThread = 20;
  std::atomic<int> accepted{0};
  std::vector<ClientError> bad_errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      if (t == 0) {
        for (int i = 0; i < kPerThread; ++i) {
          auto lookup = client.job("a b");
          if (!lookup) bad_errors.push_back(lookup.error());
          auto op = client.admin({"frobnicate", "", {}, 0, 0});
          if (!op) bad_errors.push_back(op.error());
        }
        std::vector<JobSpec> huge;
        for (int i = 0; i < 20; ++i) huge.push_back({"shared", "noop", std::string(1 << 20, 'x'), fmt::format("huge-{}", i), 0, 0});
        auto big = client.enqueue_batch(std::move(huge));
        if (!big) bad_errors.push_back(big.error());
        return;
      }
      for (int i = 0; i < kPerThread; ++i) {
        auto r = client.enqueue({"shared", "noop", "", fmt::format("t{}-{}", t, i), Client::in_ms(3'600'000), 0});
        if (r && r->status == EnqueueResult::Status::accepted) ++accepted;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(accepted.load(), (kThreads - 1) * kPerThread);
  ASSERT_EQ(bad_errors.size(), 2u * kPerThread + 1);
  for (const auto& e : bad_errors) EXPECT_EQ(e.code, "bad_argument") << e.message;
  EXPECT_NE(bad_errors.back().message.find("frame limit"), std::string::npos) << bad_errors.back().message;
  EXPECT_EQ(cluster.log_count("rejected frame"), 0u) << "a bad request reached the broker";
  EXPECT_EQ(cluster.stats("shared")->accepted, (kThreads - 1) * kPerThread);

  zmq::context_t context(1);
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.set(zmq::sockopt::rcvtimeo, 10'000);
  raw.connect(cluster.endpoint());
  raw.send(zmq::buffer(proto::encode(proto::JobRequest{77, "a b", ""})));
  zmq::message_t answer;
  ASSERT_TRUE(raw.recv(answer));
  auto frame = proto::decode(answer.to_string_view(), proto::kMaxReplyValues);
  ASSERT_TRUE(frame);
  auto* error = std::get_if<proto::ErrorFrame>(&*frame);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->request_id, 77u);
  EXPECT_EQ(error->code, "bad_frame");
}

// An event loop's way to keep N requests outstanding: each answer's
// callback sends the next request. Every job of every chain is accepted once.
TEST(Client, CallbacksThatEnqueueAgainKeepChainsOfRequestsGoingAndEveryJobIsAcceptedOnce) {
  Cluster cluster;
  Client client(cluster.endpoint());
  constexpr int kChains = 20, kPerChain = 50;
  std::mutex mutex;
  std::condition_variable done_cv;
  std::set<std::string> accepted;
  int errors = 0, chains_done = 0;
  std::function<void(int, int)> send = [&](int chain, int n) {
    client.enqueue_async({"chains", "noop", "", fmt::format("c{}-{}", chain, n), Client::in_ms(3'600'000), 0},
                         [&, chain, n](std::expected<EnqueueResult, ClientError> r) {
                           {
                             std::lock_guard lock(mutex);
                             if (r && r->status == EnqueueResult::Status::accepted) accepted.insert(r->id);
                             else ++errors;
                           }
                           if (n + 1 < kPerChain) return send(chain, n + 1);
                           std::lock_guard lock(mutex);
                           ++chains_done;
                           done_cv.notify_all();
                         });
  };
  for (int c = 0; c < kChains; ++c) send(c, 0);
  std::unique_lock lock(mutex);
  ASSERT_TRUE(done_cv.wait_for(lock, 60s, [&] { return chains_done == kChains; })) << chains_done << " chains ended";
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(accepted.size(), static_cast<size_t>(kChains * kPerChain));
  lock.unlock();
  auto stats = cluster.stats("chains");
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->accepted, kChains * kPerChain);
}

// A blocking call from a callback would wait for the thread it runs on: it
// is refused at once, and the client goes on answering.
TEST(Client, ABlockingCallFromACallbackIsRefusedInsteadOfWaitingForever) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 30'000, .attempts = 1});
  std::promise<std::vector<std::string>> codes;
  client.enqueue_async({"q", "t", "p", "first", 0, 0}, [&](std::expected<EnqueueResult, ClientError>) {
    std::vector<std::string> seen;
    auto e = client.enqueue({"q", "t", "p", "inner", 0, 0});
    seen.push_back(e ? "answered" : e.error().code);
    auto s = client.stats();
    seen.push_back(s ? "answered" : s.error().code);
    codes.set_value(seen);
  });
  auto received = broker.receive();
  ASSERT_TRUE(received);
  auto* enqueue = std::get_if<proto::Enqueue>(&received->frame);
  ASSERT_NE(enqueue, nullptr);
  broker.reply(received->routing_id, proto::EnqueueReply{enqueue->request_id, {{"first", proto::EnqueueStatus::accepted, ""}}, 0});
  auto answer = codes.get_future();
  ASSERT_EQ(answer.wait_for(10s), std::future_status::ready) << "the callback blocked";
  EXPECT_EQ(answer.get(), (std::vector<std::string>{"bad_argument", "bad_argument"}));
  EXPECT_FALSE(broker.receive(300ms)) << "the refused calls sent nothing";
}

// Destroying the client answers every pending callback "unavailable", and a
// callback that calls again from there is answered too, not forgotten.
TEST(Client, DestroyingTheClientAnswersPendingCallbacksAndTheCallsTheyMakeThen) {
  FakeBroker broker;
  std::atomic<int> answers{0}, unavailable{0};
  {
    Client client(broker.endpoint(), ClientOptions{.timeout_ms = 60'000, .attempts = 1});
    for (int i = 0; i < 3; ++i)
      client.enqueue_async({"q", "t", "p", fmt::format("job-{}", i), 0, 0}, [&](std::expected<EnqueueResult, ClientError> r) {
        ++answers;
        if (!r && r.error().code == "unavailable") ++unavailable;
        // Called once more from the closing client: answered at once.
        client.enqueue_async({"q", "t", "p", "", 0, 0}, [&](std::expected<EnqueueResult, ClientError> again) {
          ++answers;
          if (!again && again.error().code == "unavailable") ++unavailable;
        });
      });
    std::set<std::string> routing_ids;
    std::string routing_id;
    receive_jobs(broker, 3, routing_id, routing_ids);
  }
  EXPECT_EQ(answers.load(), 6);
  EXPECT_EQ(unavailable.load(), 6);
}

// A callback answered by a timeout may call again: that request goes out,
// though the client had nothing else to wait for.
TEST(Client, ARequestMadeFromATimedOutRequestsCallbackIsSent) {
  FakeBroker broker;
  Client client(broker.endpoint(), ClientOptions{.timeout_ms = 200, .attempts = 1});
  std::promise<std::string> first_error;
  client.enqueue_async({"q", "t", "p", "first", 0, 0}, [&](std::expected<EnqueueResult, ClientError> r) {
    first_error.set_value(r ? "answered" : r.error().code);
    client.enqueue_async({"q", "t", "p", "second", 0, 0}, [](std::expected<EnqueueResult, ClientError>) {});
  });
  auto first = broker.receive();
  ASSERT_TRUE(first);
  EXPECT_EQ(first_error.get_future().get(), "timeout");
  auto second = broker.receive();
  ASSERT_TRUE(second) << "the request made from the callback was never sent";
  auto* enqueue = std::get_if<proto::Enqueue>(&second->frame);
  ASSERT_NE(enqueue, nullptr);
  EXPECT_EQ(enqueue->jobs.at(0).id, "second");
}
