// The dispatcher's pure state, without a broker: how a lease round shares a
// worker's free slots among its queues (SlotAllotter), which worker each
// job of a batch goes to (BatchPlacer), and what lease calls still out have
// counted (ReservedCounts).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "broker/loop/batch_placer.hpp"
#include "broker/loop/reserved_counts.hpp"
#include "broker/loop/slot_allotter.hpp"

using dueq::broker::BatchPlacer;
using dueq::broker::ReservedCounts;
using dueq::broker::SlotAllotter;

namespace {

struct ServedQueues {
  std::vector<std::string> queues;
  std::vector<uint32_t> weights;
};

SlotAllotter::Worker worker_of(const std::string& id, int64_t free, const ServedQueues& served, bool strict = false) {
  return {id, free, &served.queues, &served.weights, strict};
}

// Slots of `worker` each queue got in `allotment` (0 when none).
int64_t got(const SlotAllotter::Allotment& allotment, const std::string& queue, const std::string& worker) {
  const auto q = allotment.find(queue);
  if (q == allotment.end()) return 0;
  const auto w = q->second.find(worker);
  return w == q->second.end() ? 0 : w->second;
}

// The workers chosen for `jobs` jobs, in order; -1 for a job no worker took.
std::vector<int> placements(const std::vector<BatchPlacer::Slot>& slots, size_t first, int jobs) {
  BatchPlacer placer(slots, first);
  std::vector<int> out;
  for (int i = 0; i < jobs; ++i) {
    const auto at = placer.next();
    out.push_back(at ? static_cast<int>(*at) : -1);
  }
  return out;
}

}  // namespace

TEST(SlotAllotter, AWorkerOfOneLeasingQueueGivesItWhatItsCallHasRoomFor) {
  SlotAllotter allotter;
  const ServedQueues served{{"a", "b"}, {1, 1}};
  const auto out = allotter.allot({worker_of("w1", 10, served)}, {{"a", {4, false}}});
  EXPECT_EQ(got(out, "a", "w1"), 4);
  EXPECT_EQ(got(out, "b", "w1"), 0);
}

TEST(SlotAllotter, TwoWorkersDoNotCountTheSameRoomOfACall) {
  SlotAllotter allotter;
  const ServedQueues served{{"a"}, {1}};
  const auto out = allotter.allot({worker_of("w1", 3, served), worker_of("w2", 3, served)}, {{"a", {4, false}}});
  EXPECT_EQ(got(out, "a", "w1"), 3);
  EXPECT_EQ(got(out, "a", "w2"), 1);
}

TEST(SlotAllotter, AStrictWorkerGivesEverySlotToTheFirstOfItsQueuesThatLeases) {
  SlotAllotter allotter;
  const ServedQueues served{{"urgent", "bulk"}, {1, 5}};
  const auto out = allotter.allot({worker_of("w1", 6, served, true)}, {{"urgent", {10, false}}, {"bulk", {10, false}}});
  EXPECT_EQ(got(out, "urgent", "w1"), 6);
  EXPECT_EQ(got(out, "bulk", "w1"), 0);
  const auto later = allotter.allot({worker_of("w1", 6, served, true)}, {{"bulk", {10, false}}});
  EXPECT_EQ(got(later, "bulk", "w1"), 6);
}

// One free slot per round for a worker of weights 3 and 1: over 400 rounds
// the queues get 300 and 100, however few slots are free at a time.
TEST(SlotAllotter, OverManyRoundsEachQueueGetsItsWeightsShareOfOneSlotAtATime) {
  SlotAllotter allotter;
  const ServedQueues served{{"a", "b"}, {3, 1}};
  std::map<std::string, int64_t> total;
  for (int round = 0; round < 400; ++round) {
    const auto out = allotter.allot({worker_of("w1", 1, served)}, {{"a", {10, false}}, {"b", {10, false}}});
    total["a"] += got(out, "a", "w1");
    total["b"] += got(out, "b", "w1");
  }
  EXPECT_EQ(total["a"], 300);
  EXPECT_EQ(total["b"], 100);
}

TEST(SlotAllotter, SlotsWaitForTheNextRoundWhenTheQueueWhoseTurnItIsHasNoRoomLeft) {
  SlotAllotter allotter;
  const ServedQueues served{{"a", "b"}, {1, 1}};
  // "a" takes turns with "b" until its call (lease_batch 2) is full; the
  // worker's remaining slots are not given to "b" alone.
  const auto out = allotter.allot({worker_of("w1", 10, served)}, {{"a", {2, false}}, {"b", {10, false}}});
  EXPECT_EQ(got(out, "a", "w1"), 2);
  EXPECT_EQ(got(out, "b", "w1"), 2);
}

TEST(SlotAllotter, AQueueHeldBackByItsLimitsDropsOutAndIdlesNoOtherQueue) {
  SlotAllotter allotter;
  const ServedQueues served{{"a", "b"}, {1, 1}};
  const auto out = allotter.allot({worker_of("w1", 10, served)}, {{"a", {2, true}}, {"b", {10, false}}});
  EXPECT_EQ(got(out, "a", "w1"), 2);
  EXPECT_EQ(got(out, "b", "w1"), 8);
}

TEST(SlotAllotter, CountersCarryOverFromRoundToRoundUntilTheWorkerIsForgotten) {
  SlotAllotter allotter;
  const ServedQueues served{{"a", "b"}, {1, 1}};
  const auto first = allotter.allot({worker_of("w1", 1, served)}, {{"a", {10, false}}, {"b", {10, false}}});
  const auto second = allotter.allot({worker_of("w1", 1, served)}, {{"a", {10, false}}, {"b", {10, false}}});
  EXPECT_EQ(got(first, "a", "w1") + got(second, "a", "w1"), 1) << "the two rounds must alternate";
  EXPECT_EQ(got(first, "b", "w1") + got(second, "b", "w1"), 1);
  allotter.allot({worker_of("w1", 1, served)}, {{"a", {10, false}}, {"b", {10, false}}});
  EXPECT_NE(allotter.counter("w1", "a"), 0);
  allotter.forget([](const std::string& id) { return id == "w1"; });
  EXPECT_EQ(allotter.counter("w1", "a"), 0);
  EXPECT_EQ(allotter.counter("w1", "b"), 0);
}

TEST(SlotAllotter, AWorkerWithoutQueuesThatLeaseGetsNothing) {
  SlotAllotter allotter;
  const ServedQueues served{{"x"}, {1}};
  EXPECT_TRUE(allotter.allot({worker_of("w1", 5, served)}, {{"a", {10, false}}}).empty());
}

// Three workers of capacity 10, all free: a batch fills the worker whose
// turn it is to half its capacity, then the next one.
TEST(BatchPlacer, ABatchGoesToOneWorkerInTurnUntilItIsHalfFull) {
  const std::vector<BatchPlacer::Slot> slots{{10, 10}, {10, 10}, {10, 10}};
  EXPECT_EQ(placements(slots, 1, 12), (std::vector<int>{1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0}));
}

// Past half of every worker's capacity, jobs go one each in turn.
TEST(BatchPlacer, PastHalfOfEveryCapacityJobsGoOneEachInTurn) {
  const std::vector<BatchPlacer::Slot> slots{{5, 10}, {5, 10}, {3, 10}};
  EXPECT_EQ(placements(slots, 0, 6), (std::vector<int>{0, 1, 2, 0, 1, 2}));
}

TEST(BatchPlacer, AJobNoWorkerHasRoomForIsPlacedNowhere) {
  const std::vector<BatchPlacer::Slot> slots{{1, 2}, {0, 2}};
  EXPECT_EQ(placements(slots, 0, 3), (std::vector<int>{0, -1, -1}));
  EXPECT_EQ(placements({}, 7, 1), (std::vector<int>{-1}));
}

TEST(BatchPlacer, TheFirstTurnIsTakenModuloTheWorkers) {
  const std::vector<BatchPlacer::Slot> slots{{4, 4}, {4, 4}};
  EXPECT_EQ(placements(slots, 5, 2), (std::vector<int>{1, 1}));
}

TEST(ReservedCounts, ACountThatFallsToZeroLeavesTheTable) {
  ReservedCounts counts;
  counts.add("w1", 3);
  counts.add("w1", 2);
  counts.add("w2", 1);
  EXPECT_EQ(counts.of("w1"), 5);
  EXPECT_EQ(counts.size(), 2u);
  counts.remove("w1", 5);
  EXPECT_EQ(counts.of("w1"), 0);
  EXPECT_EQ(counts.size(), 1u);
  counts.remove("w2", 4);  // more than counted: gone, never negative
  EXPECT_EQ(counts.of("w2"), 0);
  EXPECT_EQ(counts.size(), 0u);
  counts.remove("w3", 1);  // unknown: nothing
  EXPECT_EQ(counts.size(), 0u);
}
