// A broker that reaches a Redis server that is not a writable master (a
// demoted master under a plain URL, an address re-pointed to the new
// master, an old master that does not follow the new one) leaves it at its
// first READONLY, checks ROLE at every connect, and steps down once it has
// not renewed its lease on a master for a whole lease: /readyz says 503 and
// its socket closes, so clients move to the broker that can lead.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <set>
#include <sstream>

#include "common/clock.hpp"
#include "tests/support/cluster.hpp"

namespace dueq::testing {
namespace {

using namespace std::chrono_literals;

// One dueq-broker with an HTTP port, on the Redis URL given.
struct BrokerProcess {
  BrokerProcess(const std::filesystem::path& dir, const std::string& name, const std::string& redis_url)
      : endpoint(fmt::format("tcp://127.0.0.1:{}", free_port())), http(free_port()), log(dir / (name + ".log")),
        process({bin("dueq-broker"), "--redis", redis_url, "--listen", endpoint, "--http",
                 fmt::format("127.0.0.1:{}", http), "--log-level", "info"},
                log.string()) {}

  size_t says(const std::string& needle) const { return count_of(read_file(log), needle); }
  int readyz() const {
    httplib::Client web("127.0.0.1", http);
    web.set_connection_timeout(1);
    web.set_read_timeout(2);
    auto res = web.Get("/readyz");
    return res ? res->status : -1;
  }

  std::string endpoint;
  int http;
  std::filesystem::path log;
  Process process;
};

// Two servers on unix sockets, r2 r1's replica, and the address a broker is
// given: a link to r1's socket, which repoint() moves to r2's at once (as a
// virtual address or a DNS name moves to a new master).
struct RepointableAddress {
  explicit RepointableAddress(const std::filesystem::path& dir)
      : sock1(dir / "r1.sock"), sock2(dir / "r2.sock"), link(dir / "redis.sock"),
        r1({"--unixsocket", sock1.string(), "--unixsocketperm", "700"}),
        r2({"--unixsocket", sock2.string(), "--unixsocketperm", "700"}) {
    std::filesystem::create_symlink(sock1, link);
    r2.cli(fmt::format("REPLICAOF 127.0.0.1 {}", r1.port()));
  }
  std::string url() const { return "unix://" + link.string(); }
  void repoint() {
    const auto tmp = link.string() + ".new";
    std::filesystem::create_symlink(sock2, tmp);
    std::filesystem::rename(tmp, link);  // atomic
  }

  std::filesystem::path sock1, sock2, link;
  RedisServer r1, r2;
};

// Whether `server` holds the record of delayed job `id` of queue q (in one
// of the schedule's partitions).
bool holds_scheduled(const RedisServer& server, const std::string& id) {
  return server.cli("EVAL \"local n = 0 for _, k in ipairs(redis.call('KEYS', 'dueq:{q}:schedule:*:jobs')) do "
                    "n = n + redis.call('HEXISTS', k, ARGV[1]) end return n\" 0 " + id) == "1";
}

bool replica_in_sync(const RedisServer& replica) {
  return replica.cli("INFO replication").find("master_link_status:up") != std::string::npos;
}

// `old_master` hands over to its replica `replica` with FAILOVER: writes
// paused until the replica caught up, then the roles swapped, no write lost.
void fail_over(RedisServer& old_master, RedisServer& replica) {
  ASSERT_TRUE(eventually([&] { return replica_in_sync(replica); }, 20s)) << replica.cli("INFO replication");
  ASSERT_EQ(old_master.cli("FAILOVER TIMEOUT 10000"), "OK");
  ASSERT_TRUE(eventually([&] { return replica.cli("ROLE").starts_with("master"); }, 20s)) << replica.cli("ROLE");
  ASSERT_TRUE(eventually([&] { return old_master.cli("ROLE").starts_with("slave"); }, 20s)) << old_master.cli("ROLE");
}

std::set<std::string> started_ids(const std::filesystem::path& record) {
  std::set<std::string> ids;
  for (const auto& r : read_records(record)) ids.insert(r.id);
  return ids;
}

std::vector<JobSpec> jobs_now(const std::string& prefix, int n) {
  std::vector<JobSpec> jobs;
  for (int i = 0; i < n; ++i) jobs.push_back({"q", "noop", "", fmt::format("{}-{}", prefix, i), 0, 0});
  return jobs;
}

bool all_accepted(Client& client, const std::vector<JobSpec>& jobs) {
  auto results = client.enqueue_batch(jobs);
  if (!results) return false;
  for (const auto& r : *results)
    if (r.status != EnqueueResult::Status::accepted && r.status != EnqueueResult::Status::duplicate) return false;
  return true;
}

bool all_started(const std::filesystem::path& record, const std::vector<JobSpec>& jobs) {
  const auto started = started_ids(record);
  return std::all_of(jobs.begin(), jobs.end(), [&](const JobSpec& j) { return started.contains(j.id); });
}

}  // namespace

// A lone broker under redis://: its master is turned into a replica. The
// broker leaves it at the first READONLY, refuses it at every reconnect
// (ROLE), steps down after a lease (/readyz 503), and leads again once the
// server is a master again; every job runs.
TEST(NotMaster, ALoneBrokerWhoseMasterIsDemotedStepsDownAndLeadsAgainOnceItIsAMaster) {
  TempDir dir("not-master");
  RedisServer r1, r2;
  ASSERT_EQ(r2.cli(fmt::format("REPLICAOF 127.0.0.1 {}", r1.port())), "OK");
  BrokerProcess broker(dir.path(), "broker", r1.url());
  ASSERT_TRUE(eventually([&] { return broker.readyz() == 200; }, 20s)) << read_file(broker.log);
  const auto record = dir.path() / "starts.txt";
  Process worker({bin("dueq-example-worker"), "--broker", broker.endpoint, "--queue", "q", "--record", record.string()},
                 (dir.path() / "worker.log").string());
  Client client(broker.endpoint, ClientOptions{.timeout_ms = 1000, .attempts = 1});
  const auto before = jobs_now("before", 20);
  ASSERT_TRUE(all_accepted(client, before));
  ASSERT_TRUE(eventually([&] { return all_started(record, before); }, 20s));

  fail_over(r1, r2);  // r1 is now r2's replica; the broker still names r1
  ASSERT_TRUE(eventually([&] { return broker.says("stepping down") == 1; }, 30s)) << read_file(broker.log);
  EXPECT_GE(broker.says("READONLY") + broker.says("is a slave, not a master"), 1U) << read_file(broker.log);
  ASSERT_TRUE(eventually([&] { return broker.readyz() == 503; }, 10s));
  EXPECT_TRUE(broker.process.running());
  EXPECT_EQ(r1.cli("ROLE").substr(0, 5), "slave") << "nothing promoted it meanwhile";

  // The positive control: a master again, the broker leads and serves.
  ASSERT_EQ(r1.cli("REPLICAOF NO ONE"), "OK");
  ASSERT_TRUE(eventually([&] { return broker.readyz() == 200; }, 30s)) << read_file(broker.log);
  EXPECT_EQ(broker.says("leading with epoch"), 2U) << read_file(broker.log);
  const auto after = jobs_now("after", 20);
  ASSERT_TRUE(eventually([&] { return all_accepted(client, after); }, 20s));
  ASSERT_TRUE(eventually([&] { return all_started(record, after); }, 20s)) << read_file(broker.log);
}

// The broker's address (a unix socket path) is re-pointed to the new
// master after a fail-over: the broker leaves the old one at its first
// READONLY, reconnects through the address and goes on; no accepted job is
// lost.
TEST(NotMaster, ABrokerBehindAnAddressRepointedToTheNewMasterFollowsIt) {
  TempDir dir("not-master");
  RepointableAddress address(dir.path());
  RedisServer &r1 = address.r1, &r2 = address.r2;
  ASSERT_EQ(r2.cli("ROLE").substr(0, 5), "slave");
  BrokerProcess broker(dir.path(), "broker", address.url());
  ASSERT_TRUE(eventually([&] { return broker.readyz() == 200; }, 20s)) << read_file(broker.log);
  const auto record = dir.path() / "starts.txt";
  Process worker({bin("dueq-example-worker"), "--broker", broker.endpoint, "--queue", "q", "--record", record.string()},
                 (dir.path() / "worker.log").string());

  std::mutex mutex;
  std::vector<JobSpec> accepted;
  std::jthread producer([&](const std::stop_token& stop) {
    Client client(broker.endpoint, ClientOptions{.timeout_ms = 500, .attempts = 1});
    for (int batch = 0; !stop.stop_requested(); ++batch) {
      const auto jobs = jobs_now(fmt::format("flow-{}", batch), 10);
      while (!stop.stop_requested() && !all_accepted(client, jobs)) std::this_thread::sleep_for(20ms);
      std::lock_guard lock(mutex);
      accepted.insert(accepted.end(), jobs.begin(), jobs.end());
    }
  });
  auto accepted_count = [&] { std::lock_guard lock(mutex); return accepted.size(); };
  ASSERT_TRUE(eventually([&] { return accepted_count() >= 200; }, 20s));

  fail_over(r1, r2);
  address.repoint();  // the address now leads to r2
  const size_t at_failover = accepted_count();
  ASSERT_TRUE(eventually([&] { return accepted_count() >= at_failover + 200; }, 30s)) << read_file(broker.log);
  producer.request_stop();
  producer.join();
  EXPECT_GE(broker.says("READONLY"), 1U) << read_file(broker.log);
  EXPECT_EQ(r2.cli("ROLE").substr(0, 6), "master");
  ASSERT_TRUE(eventually([&] { return all_started(record, accepted); }, 30s))
      << "accepted " << accepted.size() << ", started " << started_ids(record).size();
}

// The admin thread's reads follow a move too. Its connection, kept from an
// earlier lookup, leads to the old master, which is demoted to follow a
// server that is not there (it never gets another write), while the
// address now leads to the new master. A job accepted after the move is
// found by a lookup and a search: the admin thread checks ROLE before each
// request and leaves the demoted master instead of reading from it.
TEST(NotMaster, LookupsAndSearchesAfterAMoveReadTheNewMasterNotTheDemotedOne) {
  TempDir dir("not-master");
  RepointableAddress address(dir.path());
  RedisServer &r1 = address.r1, &r2 = address.r2;
  ASSERT_EQ(r2.cli("ROLE").substr(0, 5), "slave");
  BrokerProcess broker(dir.path(), "broker", address.url());
  ASSERT_TRUE(eventually([&] { return broker.readyz() == 200; }, 20s)) << read_file(broker.log);
  Client client(broker.endpoint, ClientOptions{.timeout_ms = 1000, .attempts = 1});
  const int64_t later = wall_ms() + 3'600'000;
  ASSERT_TRUE(all_accepted(client, {{"q", "noop", "", "before-move", later, 0}}));
  auto before = client.job_document("before-move", "q");  // opens the admin thread's connection to r1
  ASSERT_TRUE(before && before->has_value());

  ASSERT_TRUE(eventually([&] { return replica_in_sync(r2) && r1.cli("WAIT 1 5000") == "1"; }, 20s));
  ASSERT_EQ(r2.cli("REPLICAOF NO ONE"), "OK");
  RedisServer nowhere;
  const int nowhere_port = nowhere.port();
  nowhere.kill(SIGKILL);
  ASSERT_EQ(r1.cli(fmt::format("REPLICAOF 127.0.0.1 {}", nowhere_port)), "OK");
  address.repoint();  // the address now leads to r2

  // The loop leaves r1 at its first READONLY; the job is accepted on r2.
  ASSERT_TRUE(eventually([&] { return all_accepted(client, {{"q", "noop", "", "after-move", later, 0}}); }, 30s))
      << read_file(broker.log);
  EXPECT_TRUE(holds_scheduled(r2, "before-move"));
  EXPECT_TRUE(holds_scheduled(r2, "after-move"));
  EXPECT_FALSE(holds_scheduled(r1, "after-move")) << "the demoted master never got it";
  EXPECT_EQ(r1.cli("ROLE").substr(0, 5), "slave");
  auto found = client.job_document("after-move", "q");
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_TRUE(found->has_value()) << "the lookup read the demoted master";
  const auto search = run_dueq(broker.endpoint, "search q --states scheduled --id-prefix after-move --json", false);
  EXPECT_EQ(search.code, 0) << search.out;
  EXPECT_NE(search.out.find("\"after-move\""), std::string::npos) << search.out;
}

// A move that leaves the old server a master (a fail-over it did not hear
// of: it still says master, and PING and ROLE cannot tell): the loop's
// connection to it breaks and reopens through the address, at the new
// master, and the admin thread follows the loop there before its next
// request instead of reading from the server the loop left.
TEST(NotMaster, TheAdminThreadFollowsTheLoopToTheServerItReconnectedTo) {
  TempDir dir("not-master");
  RepointableAddress address(dir.path());
  RedisServer &r1 = address.r1, &r2 = address.r2;
  ASSERT_EQ(r2.cli("ROLE").substr(0, 5), "slave");
  BrokerProcess broker(dir.path(), "broker", address.url());
  ASSERT_TRUE(eventually([&] { return broker.readyz() == 200; }, 20s)) << read_file(broker.log);
  // The broker's connections on r1, by the name each thread gives its own.
  auto clients_named = [&](const std::string& name) {
    std::set<std::string> ids;
    std::istringstream lines(r1.cli("CLIENT LIST"));
    for (std::string line; std::getline(lines, line);)
      if (line.find(" name=" + name + " ") != std::string::npos) ids.insert(line.substr(3, line.find(' ') - 3));
    return ids;
  };
  const auto loop_clients = clients_named("dueq-loop");
  ASSERT_EQ(loop_clients.size(), 1u) << r1.cli("CLIENT LIST");
  Client client(broker.endpoint, ClientOptions{.timeout_ms = 1000, .attempts = 1});
  const int64_t later = wall_ms() + 3'600'000;
  ASSERT_TRUE(all_accepted(client, {{"q", "noop", "", "before-move", later, 0}}));
  auto before = client.job_document("before-move", "q");  // the admin thread's connection to r1 is open after it
  ASSERT_TRUE(before && before->has_value());
  ASSERT_EQ(clients_named("dueq-admin").size(), 1u) << r1.cli("CLIENT LIST");

  ASSERT_TRUE(eventually([&] { return replica_in_sync(r2) && r1.cli("WAIT 1 5000") == "1"; }, 20s));
  ASSERT_EQ(r2.cli("REPLICAOF NO ONE"), "OK");  // r1 stays a master
  address.repoint();  // the address now leads to r2
  for (const auto& id : loop_clients) r1.cli("CLIENT KILL ID " + id);

  ASSERT_TRUE(eventually([&] { return all_accepted(client, {{"q", "noop", "", "after-move", later, 0}}); }, 30s))
      << read_file(broker.log);
  ASSERT_TRUE(holds_scheduled(r2, "after-move"));
  ASSERT_FALSE(holds_scheduled(r1, "after-move")) << "the loop left r1";
  EXPECT_EQ(r1.cli("ROLE").substr(0, 6), "master");
  auto found = client.job_document("after-move", "q");
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_TRUE(found->has_value()) << "the lookup read the server the loop left";
}

// The leader's old master is demoted and follows nothing the leader can
// reach, while the standby's address leads to the new master: the leader
// steps down (its /readyz 503), the standby takes over, and a worker and a
// producer given both endpoints go on there.
TEST(NotMaster, ALeaderWhoseOldMasterDoesNotFollowTheNewOneStepsDownAndTheStandbyServes) {
  TempDir dir("not-master");
  RedisServer r1, r2;
  ASSERT_EQ(r2.cli(fmt::format("REPLICAOF 127.0.0.1 {}", r1.port())), "OK");
  BrokerProcess leader(dir.path(), "leader", r1.url());
  ASSERT_TRUE(eventually([&] { return leader.readyz() == 200; }, 20s)) << read_file(leader.log);
  // The standby's address is the replica: it waits until that is a master.
  BrokerProcess standby(dir.path(), "standby", r2.url());
  ASSERT_TRUE(eventually([&] { return standby.says("is a slave, not a master") >= 1; }, 20s)) << read_file(standby.log);
  const std::string both = leader.endpoint + "," + standby.endpoint;
  const auto record = dir.path() / "starts.txt";
  Process worker({bin("dueq-example-worker"), "--broker", both, "--queue", "q", "--record", record.string()},
                 (dir.path() / "worker.log").string());
  Client client(both, ClientOptions{.timeout_ms = 1000, .attempts = 2});
  const auto before = jobs_now("before", 20);
  ASSERT_TRUE(all_accepted(client, before));
  ASSERT_TRUE(eventually([&] { return all_started(record, before); }, 20s));
  std::vector<JobSpec> later;
  for (int i = 0; i < 10; ++i) later.push_back({"q", "noop", "", fmt::format("later-{}", i), wall_ms() + 3'600'000, 0});
  ASSERT_TRUE(all_accepted(client, later));

  // r2 is promoted; r1 is made the replica of a server that is not there.
  ASSERT_TRUE(eventually([&] { return replica_in_sync(r2) && r1.cli("WAIT 1 5000") == "1"; }, 20s));
  ASSERT_EQ(r2.cli("REPLICAOF NO ONE"), "OK");
  RedisServer nowhere;
  const int nowhere_port = nowhere.port();
  nowhere.kill(SIGKILL);
  ASSERT_EQ(r1.cli(fmt::format("REPLICAOF 127.0.0.1 {}", nowhere_port)), "OK");

  ASSERT_TRUE(eventually([&] { return leader.says("stepping down") == 1; }, 30s)) << read_file(leader.log);
  ASSERT_TRUE(eventually([&] { return leader.readyz() == 503; }, 10s));
  ASSERT_TRUE(eventually([&] { return standby.readyz() == 200; }, 30s)) << read_file(standby.log);
  EXPECT_EQ(standby.says("leading with epoch"), 1U);
  const auto after = jobs_now("after", 20);
  ASSERT_TRUE(eventually([&] { return all_accepted(client, after); }, 30s)) << read_file(standby.log);
  ASSERT_TRUE(eventually([&] { return all_started(record, after); }, 30s)) << read_file(standby.log);
  Client at_standby(standby.endpoint);
  auto stats = at_standby.stats();
  ASSERT_TRUE(stats);
  int64_t scheduled = -1;
  for (const auto& q : *stats)
    if (q.queue == "q") scheduled = q.scheduled;
  EXPECT_EQ(scheduled, 10) << "the jobs scheduled before the fail-over are on the new master";
  EXPECT_EQ(leader.readyz(), 503) << "the old leader stays out while its server is a replica";
}

}  // namespace dueq::testing
