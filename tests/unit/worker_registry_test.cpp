// WorkerRegistry's credit rules, without a broker: what free_slots hands
// out to confirmed, heartbeated and newcomer workers, and how many
// newcomers it keeps.
#include <gtest/gtest.h>

#include <map>

#include "broker/loop/registry.hpp"

using dueq::broker::FreeSlots;
using dueq::broker::WorkerInfo;
using dueq::broker::WorkerRegistry;

namespace {

constexpr int64_t kNoByteLimit = 1 << 30;

WorkerInfo worker_info(uint32_t capacity, bool confirmed, bool heartbeated, std::vector<std::string> queues = {"q"}) {
  WorkerInfo w;
  w.worker_id = "w";
  w.queues = std::move(queues);
  w.capacity = capacity;
  w.confirmed = confirmed;
  w.heartbeated = heartbeated;
  return w;
}

std::map<std::string, int64_t> free_of(const WorkerRegistry& registry, const std::map<std::string, int64_t>& held = {},
                                       const std::string& queue = "q") {
  std::map<std::string, int64_t> out;
  for (const FreeSlots& s : registry.free_slots(queue, kNoByteLimit, [&](const std::string& rid) {
         auto it = held.find(rid);
         return it == held.end() ? int64_t{0} : it->second;
       }))
    out[s.worker] = s.free;
  return out;
}

}  // namespace

TEST(WorkerRegistry, NewcomersGetNothingOfAQueueAnEstablishedWorkerTakes) {
  WorkerRegistry registry;
  registry.upsert("healthy", worker_info(2, true, true));
  for (int i = 0; i < 10; ++i) registry.upsert("new-" + std::to_string(i), worker_info(100, false, false));
  EXPECT_EQ(free_of(registry), (std::map<std::string, int64_t>{{"healthy", 2}}));
  // Even when the established worker is full.
  EXPECT_TRUE(free_of(registry, {{"healthy", 2}}).empty());
}

TEST(WorkerRegistry, AHeartbeatMakesAWorkerEstablishedWithTheUnconfirmedCredit) {
  WorkerRegistry registry;
  registry.upsert("beat", worker_info(100, false, true));
  registry.upsert("new", worker_info(100, false, false));
  EXPECT_EQ(free_of(registry), (std::map<std::string, int64_t>{{"beat", WorkerRegistry::kUnconfirmedCredit}}));
}

TEST(WorkerRegistry, ADrainingWorkerDoesNotKeepNewcomersOut) {
  WorkerRegistry registry;
  auto draining = worker_info(2, true, true);
  draining.draining = true;
  registry.upsert("leaving", std::move(draining));
  registry.upsert("new", worker_info(4, false, false));
  EXPECT_EQ(free_of(registry), (std::map<std::string, int64_t>{{"new", 4}}));
}

TEST(WorkerRegistry, NewcomersShareThePoolWhereNoWorkerIsEstablished) {
  WorkerRegistry registry;
  for (int i = 0; i < 10; ++i) registry.upsert("new-" + std::to_string(i), worker_info(100, false, false));
  int64_t total = 0;
  for (const auto& [rid, free] : free_of(registry)) {
    EXPECT_LE(free, WorkerRegistry::kUnconfirmedCredit) << rid;
    total += free;
  }
  EXPECT_EQ(total, WorkerRegistry::kNewcomerPool);
  // What newcomers hold is taken from the pool; an established worker
  // elsewhere (another queue) does not count.
  registry.upsert("other", worker_info(8, true, true, {"other"}));
  int64_t after = 0;
  for (const auto& [rid, free] : free_of(registry, {{"new-0", 10}, {"new-1", 6}, {"other", 8}})) after += free;
  EXPECT_EQ(after, WorkerRegistry::kNewcomerPool - 16);
}

TEST(WorkerRegistry, PastTheNewcomerLimitTheOldestNewcomerIsLetGo) {
  WorkerRegistry registry;
  for (size_t i = 0; i < WorkerRegistry::kMaxNewcomers; ++i) {
    const std::string rid = "new-" + std::to_string(i);
    registry.upsert(rid, worker_info(1, false, false));
    EXPECT_FALSE(registry.admit_newcomer(rid)) << i;
  }
  // Workers that heartbeated, confirmed or left are no longer counted.
  registry.find("new-0")->heartbeated = true;
  registry.find("new-1")->confirmed = true;
  registry.remove("new-2");
  for (int i = 0; i < 3; ++i) {
    const std::string rid = "late-" + std::to_string(i);
    registry.upsert(rid, worker_info(1, false, false));
    EXPECT_FALSE(registry.admit_newcomer(rid)) << rid;
  }
  registry.upsert("one-too-many", worker_info(1, false, false));
  EXPECT_EQ(registry.admit_newcomer("one-too-many"), std::optional<std::string>("new-3"));
}

// The dispatch looks only at the queues some worker serves: each once, in
// name order, whatever the workers' own order.
TEST(WorkerRegistry, ServedQueuesAreEveryWorkersQueuesOnceInNameOrder) {
  WorkerRegistry registry;
  EXPECT_TRUE(registry.served_queues().empty());
  registry.upsert("a", worker_info(1, true, true, {"mail", "bills"}));
  registry.upsert("b", worker_info(1, true, true, {"bills", "audit"}));
  EXPECT_EQ(registry.served_queues(), (std::vector<std::string>{"audit", "bills", "mail"}));
  registry.remove("a");
  EXPECT_EQ(registry.served_queues(), (std::vector<std::string>{"audit", "bills"}));
}
