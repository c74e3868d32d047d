// The worker library's own rules, seen from a ROUTER socket that stands in
// for the broker, with a real dueq-example-worker process.
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "common/protocol.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/fake_broker.hpp"
#include "tests/support/process.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

// Results a worker resends after a reconnect go out in frames the broker
// accepts however long their error texts: 5,000 results with 4 KiB errors
// were one 20 MB frame, which the broker dropped, and the resend after the
// next reconnect was dropped again.
TEST(Worker, ResentResultsGoInFramesUnderTheBrokersLimit) {
  FakeBroker broker;
  const auto dir = make_temp_dir("worker");
  Process worker({bin("dueq-example-worker"), "--broker", broker.endpoint(), "--queue", "q", "--concurrency", "16",
                  "--prefetch", "5000"},
                 (dir / "worker.log").string());
  auto hello = broker.receive(10s);
  ASSERT_TRUE(hello && std::holds_alternative<proto::Hello>(hello->frame));
  broker.reply(hello->routing_id, proto::Welcome{"fake-broker", 60'000});
  constexpr int kJobs = 5000;
  const std::string payload(4000, 'e');  // "asked to fail: " + payload
  for (int frame = 0; frame < kJobs / 500; ++frame) {
    proto::Tasks tasks;
    tasks.seq = static_cast<uint64_t>(frame) + 1;
    for (int i = frame * 500; i < (frame + 1) * 500; ++i)
      tasks.items.push_back(proto::Task{"q", "job-" + std::to_string(i), "fail", proto::Bytes{payload}, 0, 1, 3,
                                        static_cast<uint64_t>(1000 + i), 0, proto::payload_checksum(payload)});
    broker.reply(hello->routing_id, tasks);
  }
  // Every result, never confirmed; then the broker "restarts".
  auto collect = [&](bool after_welcome) {
    int results = 0;
    size_t largest = 0;
    while (results < kJobs) {
      auto frame = broker.receive(20s);
      if (!frame) break;
      if (auto* r = std::get_if<proto::Results>(&frame->frame)) {
        results += static_cast<int>(r->items.size());
        largest = std::max(largest, frame->bytes);
      } else if (after_welcome && std::holds_alternative<proto::Hello>(frame->frame)) {
        broker.reply(frame->routing_id, proto::Welcome{"fake-broker-2", 60'000});
      }
    }
    return std::pair{results, largest};
  };
  auto [first, first_largest] = collect(false);
  ASSERT_EQ(first, kJobs);
  broker.reply(hello->routing_id, proto::ErrorFrame{0, "unknown_worker", "say hello first", 0});
  auto [resent, largest] = collect(true);
  EXPECT_EQ(resent, kJobs) << "every unconfirmed result resent";
  EXPECT_LE(largest, proto::kMaxResultsFrameBytes + size_t{64} * 1024);
  EXPECT_LE(first_largest, proto::kMaxResultsFrameBytes + size_t{64} * 1024);
  worker.signal(SIGTERM);
  (void)worker.wait(10s);
  std::filesystem::remove_all(dir);
}

// Every result of short jobs sent one frame each arrives, done. Short jobs
// finishing within a millisecond of each other share a RESULTS frame
// (worker.cpp, kResultsLingerUs); how many frames that makes depends on this
// machine's timing, so it is printed, not asserted.
TEST(Worker, ResultsOfShortJobsSentOneFrameEachAllArriveDone) {
  FakeBroker broker;
  const auto dir = make_temp_dir("worker");
  Process worker({bin("dueq-example-worker"), "--broker", broker.endpoint(), "--queue", "q", "--concurrency", "8"},
                 (dir / "worker.log").string());
  auto hello = broker.receive(10s);
  ASSERT_TRUE(hello && std::holds_alternative<proto::Hello>(hello->frame));
  broker.reply(hello->routing_id, proto::Welcome{"fake-broker", 60'000});
  constexpr int kJobs = 20;
  for (int i = 0; i < kJobs; ++i) {
    const std::string payload = "p";
    proto::Tasks tasks;
    tasks.seq = static_cast<uint64_t>(i) + 1;
    tasks.items.push_back(proto::Task{"q", "job-" + std::to_string(i), "noop", proto::Bytes{payload}, 0, 1, 3,
                                      static_cast<uint64_t>(1000 + i), 0, proto::payload_checksum(payload)});
    broker.reply(hello->routing_id, tasks);  // one frame per job, as the broker spreads single jobs
    std::this_thread::sleep_for(50us);        // each finishes apart from the others
  }
  int results_frames = 0, results = 0;
  while (results < kJobs) {
    auto frame = broker.receive(5s);
    ASSERT_TRUE(frame) << results << " results arrived";
    if (auto* r = std::get_if<proto::Results>(&frame->frame)) {
      ++results_frames;
      for (const auto& item : r->items) {
        EXPECT_EQ(item.outcome, proto::Outcome::done) << item.id;
        ++results;
      }
    }
  }
  EXPECT_EQ(results, kJobs);
  std::printf("[ figures  ] %d results in %d RESULTS frames\n", kJobs, results_frames);
  worker.signal(SIGTERM);
  (void)worker.wait(10s);
  std::filesystem::remove_all(dir);
}
