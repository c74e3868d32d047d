// Workers and producers on other hosts: reached over a network link that
// routes to the broker and not to Redis.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/netns.hpp"

namespace dueq::testing {
namespace {

using namespace std::chrono_literals;

// Rule: a worker and a producer on another host need only a route to the
// broker; they hold no Redis address and cannot reach Redis, and every job
// the producer enqueues runs on that worker at its due time.
TEST(Hosts, AWorkerAndAProducerInAnotherNetworkNamespaceRunEveryJobWithoutARouteToRedis) {
  NetNamespace other_host;
  if (!other_host.available()) GTEST_SKIP() << other_host.why_not();
  TempDir dir("hosts");
  Cluster cluster;
  cluster.broker().signal(SIGTERM);
  cluster.broker().wait();
  cluster.use_listen_host(other_host.host_ip());
  // Plaintext on a link of the test's own (a network you trust).
  cluster.start_broker({"--insecure"});
  const std::string broker_port = cluster.endpoint().substr(cluster.endpoint().rfind(':') + 1);
  const std::string redis_port = std::to_string(cluster.redis().port());

  // What the other host can reach: the broker's port, and no Redis at any
  // address of this machine.
  EXPECT_EQ(other_host.run("exec 3<>/dev/tcp/" + other_host.host_ip() + "/" + broker_port), 0);
  EXPECT_NE(other_host.run("exec 3<>/dev/tcp/" + other_host.host_ip() + "/" + redis_port), 0);
  EXPECT_NE(other_host.run("exec 3<>/dev/tcp/127.0.0.1/" + redis_port), 0);
  EXPECT_NE(other_host.run("redis-cli -h " + other_host.host_ip() + " -p " + redis_port + " PING | grep -q PONG"), 0);

  const auto record = dir / "starts.txt";
  std::vector<std::string> worker = other_host.exec_prefix();
  for (const auto& arg : {bin("dueq-example-worker"), std::string("--broker"), cluster.endpoint(), std::string("--queue"),
                          std::string("remote"), std::string("--concurrency"), std::string("4"), std::string("--record"),
                          record.string()})
    worker.push_back(arg);
  cluster.start_worker(worker);
  ASSERT_TRUE(cluster.wait_for_workers(1));

  constexpr int kJobs = 200;
  const int64_t base = wall_ms() + 1'000;
  std::map<std::string, int64_t> due_of;
  {
    std::ofstream jobs(dir / "jobs.jsonl");
    for (int i = 0; i < kJobs; ++i) {
      const std::string id = fmt::format("remote-{}", i);
      due_of[id] = base + int64_t{i} * 5;
      jobs << fmt::format(R"({{"queue":"remote","type":"noop","id":"{}","at_ms":{}}})", id, due_of[id]) << "\n";
    }
  }
  EXPECT_EQ(other_host.run(bin("dueq") + " --broker " + cluster.endpoint() + " enqueue --from " + (dir / "jobs.jsonl").string()), 0);

  ASSERT_TRUE(eventually([&] { return read_records(record).size() >= static_cast<size_t>(kJobs); }, 30s))
      << read_records(record).size() << " of " << kJobs << " ran";
  std::set<std::string> ran;
  for (const auto& r : read_records(record)) {
    ASSERT_TRUE(due_of.contains(r.id)) << r.id;
    EXPECT_TRUE(ran.insert(r.id).second) << r.id << " ran twice";
    EXPECT_GE(r.start_us, due_of[r.id] * 1000) << r.id << " started early";
  }
  EXPECT_EQ(ran.size(), static_cast<size_t>(kJobs));
  auto audit = run_dueq(cluster.endpoint(), "audit --queue remote");
  EXPECT_EQ(audit.code, 0) << audit.out;
}

}  // namespace
}  // namespace dueq::testing
