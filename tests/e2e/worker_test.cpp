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

// Short jobs that finish within a millisecond of each other are answered in
// a RESULTS frame together (worker.cpp, kResultsLingerUs), not one frame each: a
// frame costs the worker, the broker and the CONFIRM back more than a
// short job does.
TEST(Worker, ResultsOfShortJobsFinishingTogetherGoOutTogether) {
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
    tasks.seq = static_cast<uint64_t>(i + 1);
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
        EXPECT_EQ(item.outcome, static_cast<uint8_t>(proto::Outcome::done)) << item.id;
        ++results;
      }
    }
  }
  EXPECT_EQ(results, kJobs);
  EXPECT_LE(results_frames, 5) << "the 20 results went out in " << results_frames << " frames";
  worker.signal(SIGTERM);
  (void)worker.wait(10s);
  std::filesystem::remove_all(dir);
}
