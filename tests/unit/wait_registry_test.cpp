// The WAIT requests the broker holds (broker/loop/waits.hpp): by job, each
// connection's share and the total bounded, a resend replacing its first
// send, timeouts taken out in order.
#include <gtest/gtest.h>

#include "broker/loop/waits.hpp"

using namespace dueq::broker;

namespace {
WaitRegistry::Waiter waiter(const std::string& peer, uint64_t request_id, int64_t deadline_ms) {
  return {Peer{peer}, request_id, deadline_ms};
}
}  // namespace

TEST(WaitRegistry, AJobsWaitersAreTakenTogetherAndTheRestStay) {
  WaitRegistry registry;
  ASSERT_TRUE(registry.add("q", "a", waiter("p1", 1, 100)));
  ASSERT_TRUE(registry.add("q", "a", waiter("p2", 1, 200)));
  ASSERT_TRUE(registry.add("q", "b", waiter("p1", 2, 50)));
  ASSERT_TRUE(registry.add("r", "a", waiter("p1", 3, 70)));
  EXPECT_EQ(registry.size(), 4u);
  EXPECT_EQ(registry.ids("q"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(registry.queues(), (std::vector<std::string>{"q", "r"}));
  EXPECT_EQ(registry.earliest_deadline_ms(), 50);
  const auto taken = registry.take("q", "a");
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].peer.routing_id, "p1");
  EXPECT_EQ(taken[1].peer.routing_id, "p2");
  EXPECT_FALSE(registry.waits_for("q", "a"));
  EXPECT_TRUE(registry.waits_for("r", "a"));
  EXPECT_TRUE(registry.take("q", "a").empty());
  EXPECT_EQ(registry.size(), 2u);
}

TEST(WaitRegistry, TimeoutsAreTakenOutAtTheirDeadlineAndNotBefore) {
  WaitRegistry registry;
  registry.add("q", "a", waiter("p", 1, 100));
  registry.add("q", "a", waiter("p", 2, 300));
  registry.add("q", "b", waiter("p", 3, 200));
  registry.mark_read("q", "a", registry.last_seq());
  registry.mark_read("q", "b", registry.last_seq());
  EXPECT_TRUE(registry.take_expired(99).empty());
  auto first = registry.take_expired(200);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(registry.earliest_deadline_ms(), 300);
  EXPECT_EQ(registry.ids("q"), (std::vector<std::string>{"a"}));
  auto last = registry.take_expired(1'000);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].first, (WaitRegistry::JobKey{"q", "a"}));
  EXPECT_EQ(last[0].second.request_id, 2u);
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_EQ(registry.earliest_deadline_ms(), -1);
  EXPECT_TRUE(registry.queues().empty());
}

// A wait is answered "pending" only after a read sent after it came found
// no end (a timeout of 0 answers what Redis holds), or, unread, a grace
// past its deadline; a read sent before a waiter came does not count for it.
TEST(WaitRegistry, AWaitPastItsDeadlineWaitsForAReadSentAfterIt) {
  WaitRegistry registry;
  registry.add("q", "a", waiter("p", 1, 100));
  const uint64_t first_read = registry.last_seq();
  registry.add("q", "a", waiter("p", 2, 100));
  EXPECT_TRUE(registry.take_expired(100).empty()) << "no read yet";
  registry.mark_read("q", "a", first_read);
  auto read = registry.take_expired(100);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].second.request_id, 1u);
  EXPECT_TRUE(registry.take_expired(100 + WaitRegistry::kUnreadGraceMs - 1).empty()) << "its read was sent before it came";
  auto unread = registry.take_expired(100 + WaitRegistry::kUnreadGraceMs);
  ASSERT_EQ(unread.size(), 1u);
  EXPECT_EQ(unread[0].second.request_id, 2u);
}

TEST(WaitRegistry, AResendReplacesItsFirstSendAndCountsOnce) {
  WaitRegistry registry;
  ASSERT_TRUE(registry.add("q", "a", waiter("p", 7, 100)));
  ASSERT_TRUE(registry.add("q", "a", waiter("p", 7, 900)));
  EXPECT_EQ(registry.size(), 1u);
  EXPECT_EQ(registry.earliest_deadline_ms(), 900);
  registry.mark_read("q", "a", registry.last_seq());
  EXPECT_TRUE(registry.take_expired(500).empty());
}

TEST(WaitRegistry, EachConnectionHoldsAtMostItsShareAndAllAtMostTheTotal) {
  WaitRegistry registry;
  for (uint64_t i = 0; i < WaitRegistry::kMaxPerPeer; ++i)
    ASSERT_TRUE(registry.add("q", std::to_string(i), waiter("greedy", i, 100)));
  EXPECT_FALSE(registry.add("q", "one-more", waiter("greedy", 99'999, 100)));
  EXPECT_FALSE(registry.waits_for("q", "one-more")) << "a refused wait leaves nothing behind";
  EXPECT_TRUE(registry.add("q", "one-more", waiter("other", 1, 100))) << "another connection still may";
  registry.take("q", "0");
  EXPECT_TRUE(registry.add("q", "again", waiter("greedy", 100'000, 100))) << "a share freed is a share again";
  size_t peers = 2;
  while (registry.size() < WaitRegistry::kMax) {
    const std::string peer = "p" + std::to_string(peers++);
    for (size_t i = 0; i < WaitRegistry::kMaxPerPeer && registry.size() < WaitRegistry::kMax; ++i)
      ASSERT_TRUE(registry.add("q", peer + "-" + std::to_string(i), waiter(peer, i, 100)));
  }
  EXPECT_FALSE(registry.add("q", "past-total", waiter("fresh", 1, 100)));
  EXPECT_EQ(registry.size(), WaitRegistry::kMax);
}
