// The broker's own stalls (broker/loop/stall_watch.hpp) and what it does
// about them in its pure state: workers counted as heard from, deliveries'
// leases held (Broker::on_own_stall).
#include <gtest/gtest.h>

#include <vector>

#include "broker/loop/inflight.hpp"
#include "broker/loop/registry.hpp"
#include "broker/loop/stall_watch.hpp"

namespace dueq::broker {
namespace {

// A thread CPU clock that reads `ms`.
auto at(int64_t ms) {
  return [ms] { return ms; };
}

TEST(StallWatch, WaitsTheLoopChoseAndWorkAreNoStall) {
  StallWatch watch(500);
  watch.waiting(0, at(0), 5'000);
  EXPECT_EQ(watch.woke(5'000, at(0)), 0);       // an idle wait, to the end
  watch.waiting(5'100, at(100), 5'000);         // 100 ms of work
  EXPECT_EQ(watch.woke(5'300, at(100)), 0);     // woken early by a frame
  watch.waiting(8'300, at(3'100), 0);           // 3 s of work, all of it on the CPU: a busy broker
  EXPECT_EQ(watch.woke(8'300, at(3'100)), 0);
  watch.waiting(8'700, at(3'100), 0);           // 400 ms off the CPU: under the threshold
  EXPECT_EQ(watch.woke(8'700, at(3'100)), 0);
}

TEST(StallWatch, AStopInAWaitOrInWorkIsTheTimeTheBrokerDidNotRun) {
  StallWatch watch(500);
  watch.waiting(0, at(0), 10);
  EXPECT_EQ(watch.woke(1'810, at(0)), 1'800);  // SIGSTOPped while waiting 10 ms
  watch.waiting(3'630, at(20), 1'000);         // stopped 1.8 s while working 20 ms
  EXPECT_EQ(watch.woke(3'640, at(20)), 1'800);
  watch.waiting(3'640, at(20), 1'000);
  EXPECT_EQ(watch.woke(4'300, at(20)), 0) << "a stall is counted once";
}

TEST(StallWatch, TheCpuClockIsReadOnlyWhenAStallIsPossibleAndAtMostOnceAMillisecond) {
  StallWatch watch(500);
  int reads = 0;
  auto counted = [&] { ++reads; return int64_t{0}; };
  watch.waiting(0, counted, 0);
  (void)watch.woke(0, counted);
  for (int64_t t = 1; t <= 100; ++t) {
    watch.waiting(t, counted, 0);  // 1 ms after waking: no stall possible, no read
    (void)watch.woke(t, counted);
    (void)watch.woke(t, counted);  // woken twice in one ms: read once
  }
  EXPECT_EQ(reads, 101);
}

TEST(StallWatch, AWorkerSilentDuringTheBrokersStallIsGivenTheGraceAndNoLonger) {
  WorkerRegistry registry;
  WorkerInfo quiet;
  quiet.last_seen_ms = 1'000;
  WorkerInfo fresh;
  fresh.last_seen_ms = 9'000;
  registry.upsert("quiet", quiet);
  registry.upsert("fresh", fresh);
  registry.count_as_heard(5'000);
  EXPECT_EQ(registry.find("quiet")->last_seen_ms, 5'000);
  EXPECT_EQ(registry.find("fresh")->last_seen_ms, 9'000) << "heard from later: kept";
  EXPECT_TRUE(registry.silent_since(5'000).empty());
  EXPECT_EQ(registry.silent_since(5'001), std::vector<std::string>{"quiet"});
  // A broker that stalls again and again gives a silent worker one grace.
  registry.count_as_heard(7'000);
  EXPECT_EQ(registry.find("quiet")->last_seen_ms, 5'000);
}

TEST(StallWatch, LeasesRunningOutBeforeTheGraceAreHeldToItAndLongerOnesKept) {
  InflightTable inflight;
  InflightJob soon{.queue = "q", .id = "soon", .token = 1, .worker = "w", .lease_deadline_ms = 2'000};
  InflightJob lapsed{.queue = "q", .id = "lapsed", .token = 2, .worker = "w", .lease_deadline_ms = 500};
  InflightJob later{.queue = "q", .id = "later", .token = 3, .worker = "w", .lease_deadline_ms = 60'000};
  inflight.add(soon);
  inflight.add(lapsed);
  inflight.add(later);
  std::vector<std::string> held;
  EXPECT_EQ(inflight.hold_until(5'000, [&](const InflightJob& job) { held.push_back(job.id); }), 2U);
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<std::string>{"lapsed", "soon"}));
  EXPECT_EQ(inflight.find("q", "lapsed")->lease_deadline_ms, 5'000);
  EXPECT_EQ(inflight.find("q", "later")->lease_deadline_ms, 60'000);
  size_t expired = inflight.expire(4'999, [](const InflightJob&) {});
  EXPECT_EQ(expired, 0U) << "nothing held runs out before the grace";
}

}  // namespace
}  // namespace dueq::broker
