// Dispatch credit: a worker that has confirmed nothing is sent at most 16
// jobs (WorkerRegistry::kUnconfirmedCredit). A HELLO listing held jobs lifts
// that only once Redis confirms the listed delivery (its lease extended by
// token), so a forged held job buys nothing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/cluster.hpp"
#include "tests/support/raw_peer.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

// A peer that heartbeats every 200 ms what it was sent, and reads TASKS.
struct HeartbeatingPeer {
  RawPeer peer;
  std::vector<proto::JobRef> held;
  std::vector<uint64_t> seqs;

  // TASKS items it gets within `window`.
  size_t tasks_within(std::chrono::milliseconds window) {
    size_t items = 0;
    const auto end = std::chrono::steady_clock::now() + window;
    while (std::chrono::steady_clock::now() < end) {
      peer.send(proto::Heartbeat{held, 1'000, false});
      const auto turn_end = std::min(end, std::chrono::steady_clock::now() + 200ms);
      while (std::chrono::steady_clock::now() < turn_end) {
        auto frame = peer.receive(std::chrono::duration_cast<std::chrono::milliseconds>(turn_end - std::chrono::steady_clock::now()) + 1ms);
        if (!frame) continue;
        if (auto* tasks = std::get_if<proto::Tasks>(&*frame)) {
          items += tasks->items.size();
          seqs.push_back(tasks->seq);
          for (const auto& t : tasks->items) held.push_back(proto::JobRef{t.queue, t.id, t.token});
        }
      }
    }
    return items;
  }
};

}  // namespace

TEST(Credit, AHelloListingAForgedHeldJobLiftsNoCredit) {
  // Deliveries outlast the test: nothing is barred or reclaimed meanwhile.
  Cluster cluster({"--delivery-timeout", "60s"});
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 100; ++i) jobs.push_back({"credit", "noop", "", fmt::format("c-{}", i), 0, 1});
  ASSERT_TRUE(client.enqueue_batch(jobs));  // the queue exists in Redis now

  HeartbeatingPeer forger{RawPeer(cluster.endpoint(), "forger"), {}, {}};
  forger.peer.send(proto::Hello{"forger", {"credit"}, 1'000, {proto::JobRef{"credit", "c-0", 0x1234'5678'9abc'def0}}, "host", 1});
  auto welcome = forger.peer.receive();
  ASSERT_TRUE(welcome && std::holds_alternative<proto::Welcome>(*welcome));
  // Every extension of the forged token is refused by Redis within this window.
  const size_t first = forger.tasks_within(1500ms);
  EXPECT_EQ(first, 16U) << "a forged held job lifted the credit of a worker that confirmed nothing";

  // The positive control: RECEIVED for what it got lifts the credit.
  for (uint64_t seq : forger.seqs) forger.peer.send(proto::Received{seq});
  const size_t rest = forger.tasks_within(3000ms);
  EXPECT_EQ(first + rest, 100U);
}
