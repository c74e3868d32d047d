// CURVE and the allow-list (docs/security.md), with real broker, worker and
// CLI processes: who may connect, and what each role may do.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zmq.hpp>

#include <csignal>
#include <fstream>
#include <optional>

#include "common/curve.hpp"
#include "common/protocol.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

// Key files for the broker and each client, and the allow-list naming them.
class Keys {
 public:
  Keys() : dir_(make_temp_dir("keys")) {
    for (const char* name : {"broker", "admin", "producer", "worker", "stranger"}) {
      auto pair = generate_curve_key_pair();
      EXPECT_TRUE(pair);
      EXPECT_TRUE(write_curve_key_files((dir_ / name).string(), *pair));
      pairs_[name] = *pair;
    }
    write_allow_list({"admin", "producer", "worker"});
  }
  ~Keys() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // The allow-list with the keys of `names` (the worker may hold 2 jobs of
  // queue "mail"; the producer may use "mail" only; "stranger", when listed,
  // is a producer of every queue); `listed_key` gives a
  // name another name's public key.
  void write_allow_list(const std::vector<std::string>& names, const std::map<std::string, std::string>& listed_key = {}) {
    std::ofstream out(allow_list());
    for (const auto& name : names) {
      const std::string& key = listed_key.contains(name) ? listed_key.at(name) : name;
      out << "[[key]]\nname = \"" << name << "\"\npublic = \"" << pairs_.at(key).public_key << "\"\n";
      if (name == "admin") out << "role = \"admin\"\n";
      if (name == "producer") out << "role = \"producer\"\nqueues = [\"mail\"]\n";
      if (name == "worker") out << "role = \"worker\"\nqueues = [\"mail\"]\ncapacity = 2\n";
      if (name == "stranger") out << "role = \"producer\"\nqueues = [\"*\"]\n";
    }
  }
  std::string allow_list() const { return (dir_ / "allow.toml").string(); }
  std::string key_file(const std::string& name) const { return (dir_ / (name + ".key")).string(); }
  std::string broker_pub() const { return (dir_ / "broker.pub").string(); }
  const CurveKeyPair& pair(const std::string& name) const { return pairs_.at(name); }
  ClientOptions client(const std::string& name, int64_t timeout_ms = 2'000) const {
    return ClientOptions{.timeout_ms = timeout_ms, .attempts = 1, .broker_key = broker_pub(), .key_file = key_file(name)};
  }
  std::vector<std::string> broker_args() const { return {"--curve-key", key_file("broker"), "--allow-list", allow_list()}; }
  std::vector<std::string> worker_args(const std::string& name) const {
    return {"--broker-key", broker_pub(), "--key", key_file(name)};
  }

 private:
  std::filesystem::path dir_;
  std::map<std::string, CurveKeyPair> pairs_;
};

// A DEALER with a client key pair that sends frames by hand.
class CurvePeer {
 public:
  CurvePeer(const std::string& endpoint, const Keys& keys, const std::string& name, const std::string& routing_id)
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::routing_id, routing_id);
    socket_.set(zmq::sockopt::linger, 0);
    apply_client_curve(socket_, ClientCurve{*read_curve_public_key(keys.broker_pub()), keys.pair(name)});
    socket_.connect(endpoint);
  }
  template <typename T>
  void send(const T& body) {
    const std::string bytes = proto::encode(body);
    socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }
  // Every frame that arrives within `window`.
  std::vector<proto::Frame> receive_for(std::chrono::milliseconds window) {
    std::vector<proto::Frame> frames;
    const auto until = std::chrono::steady_clock::now() + window;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, left) != 1) continue;
      zmq::message_t message;
      if (!socket_.recv(message)) continue;
      if (auto frame = proto::decode(message.to_string_view())) frames.push_back(std::move(*frame));
    }
    return frames;
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

size_t tasks_in(const std::vector<proto::Frame>& frames) {
  size_t n = 0;
  for (const auto& f : frames)
    if (auto* tasks = std::get_if<proto::Tasks>(&f)) n += tasks->items.size();
  return n;
}

bool refused_in(const std::vector<proto::Frame>& frames) {
  for (const auto& f : frames)
    if (auto* error = std::get_if<proto::ErrorFrame>(&f); error && error->code == "refused") return true;
  return false;
}

}  // namespace

// A key that is not on the allow-list (or no key at all) completes no
// handshake: it gets no job, no payload and no answer, and the broker logs
// the refusal with the key's short id.
TEST(Security, AnUnknownKeyGetsNoJobNoPayloadAndNoAnswer) {
  Keys keys;
  Cluster cluster(keys.broker_args(), {}, keys.client("admin"));
  Client producer(cluster.endpoint(), keys.client("producer"));
  ASSERT_TRUE(producer.enqueue({"mail", "noop", "the-secret-payload", "m1", 0, 3}));

  Client stranger(cluster.endpoint(), keys.client("stranger", 500));
  auto enqueued = stranger.enqueue({"mail", "send", "", "s1", 0, 3});
  ASSERT_FALSE(enqueued);
  EXPECT_EQ(enqueued.error().code, "timeout");
  EXPECT_FALSE(stranger.stats());
  EXPECT_FALSE(stranger.job("m1", "mail"));

  Client plaintext(cluster.endpoint(), ClientOptions{.timeout_ms = 500, .attempts = 1});
  EXPECT_FALSE(plaintext.enqueue({"mail", "send", "", "p1", 0, 3}));

  CurvePeer squatter(cluster.endpoint(), keys, "stranger", "squatter");
  squatter.send(proto::Hello{"squatter", {"mail"}, 10, {}, "host", 1});
  const auto got = squatter.receive_for(2s);
  EXPECT_TRUE(got.empty()) << got.size() << " frames reached a key not on the allow-list";

  auto s = cluster.stats("mail");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->waiting, 1);
  EXPECT_EQ(s->accepted, 1) << "only the producer's job";
  const std::string stranger_id = keys.pair("stranger").public_key.substr(0, 8);
  EXPECT_GE(cluster.log_count("refused connection from key " + stranger_id), 1u);

  const auto record = cluster.dir() / "runs.txt";
  std::vector<std::string> argv = {bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "mail",
                                   "--record", record.string()};
  for (auto& a : keys.worker_args("worker")) argv.push_back(a);
  cluster.start_worker(argv);
  ASSERT_TRUE(eventually([&] { auto st = cluster.stats("mail"); return st && st->done == 1; }, 15s));
}

// Each role does its own work only: a worker key cannot enqueue, look up
// jobs or purge; a producer key cannot serve as a worker, use other queues
// or read stats; a worker is sent no more jobs than its key's capacity; an
// admin key can do it all. Every refusal is counted and logged.
TEST(Security, EachRoleMayDoItsOwnWorkOnly) {
  Keys keys;
  Cluster cluster(keys.broker_args(), {}, keys.client("admin"));
  // An audit takes as long as the store needs, more when the suite runs
  // other tests beside this one: the admin waits for it.
  Client admin(cluster.endpoint(), keys.client("admin", 120'000));
  Client producer(cluster.endpoint(), keys.client("producer"));
  Client as_worker(cluster.endpoint(), keys.client("worker"));

  auto by_worker = as_worker.enqueue({"mail", "send", "", "w1", 0, 3});
  ASSERT_FALSE(by_worker);
  EXPECT_EQ(by_worker.error().code, "refused") << by_worker.error().message;
  auto purge = as_worker.admin({.op = "purge", .queue = "mail", .older_than_ms = 1});
  ASSERT_FALSE(purge);
  EXPECT_EQ(purge.error().code, "refused");
  EXPECT_FALSE(as_worker.job("m1", "mail"));

  auto other_queue = producer.enqueue({"other", "send", "", "o1", 0, 3});
  ASSERT_TRUE(other_queue);
  EXPECT_EQ(other_queue->status, EnqueueResult::Status::rejected);
  EXPECT_NE(other_queue->reason.find("may not use queue 'other'"), std::string::npos) << other_queue->reason;
  auto stats = producer.stats();
  ASSERT_FALSE(stats);
  EXPECT_EQ(stats.error().code, "refused");
  auto lookup = producer.job("x", "other");
  ASSERT_FALSE(lookup);
  EXPECT_EQ(lookup.error().code, "refused");
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(producer.enqueue({"mail", "slow", "", fmt::format("m{}", i), 0, 3}));
  auto own = producer.job("m0", "mail");
  ASSERT_TRUE(own) << own.error().message;
  EXPECT_TRUE(own->has_value());

  CurvePeer producer_as_worker(cluster.endpoint(), keys, "producer", "pretender");
  producer_as_worker.send(proto::Hello{"pretender", {"mail"}, 10, {}, "host", 1});
  const auto frames = producer_as_worker.receive_for(1500ms);
  EXPECT_EQ(tasks_in(frames), 0u);
  EXPECT_TRUE(refused_in(frames));
  CurvePeer worker_elsewhere(cluster.endpoint(), keys, "worker", "elsewhere");
  worker_elsewhere.send(proto::Hello{"elsewhere", {"other"}, 10, {}, "host", 1});
  EXPECT_TRUE(refused_in(worker_elsewhere.receive_for(1s)));

  // Asks for 8 at once; its key allows 2.
  std::vector<std::string> argv = {bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "mail",
                                   "--concurrency", "8", "--exec", "slow=sleep 0.5"};
  for (auto& a : keys.worker_args("worker")) argv.push_back(a);
  cluster.start_worker(argv);
  int64_t most_in_flight = 0;
  ASSERT_TRUE(eventually(
      [&] {
        auto s = cluster.stats("mail");
        if (s) most_in_flight = std::max(most_in_flight, s->in_flight);
        return s && s->done == 6;
      },
      30s, 50ms));
  EXPECT_LE(most_in_flight, 2);
  EXPECT_GE(most_in_flight, 1);

  auto audit = admin.admin({.op = "audit"});
  ASSERT_TRUE(audit) << audit.error().message;
  EXPECT_EQ(audit->summary, "clean");
  ASSERT_TRUE(admin.stats());
  auto admin_enqueue = admin.enqueue({"other", "send", "", "a1", Client::in_ms(3'600'000), 3});
  ASSERT_TRUE(admin_enqueue);
  EXPECT_EQ(admin_enqueue->status, EnqueueResult::Status::accepted);
  auto cancelled = admin.admin({.op = "cancel", .queue = "other", .ids = {"a1"}});
  ASSERT_TRUE(cancelled) << cancelled.error().message;

  // Logged one line per key per 10 s, each with the count of all refusals.
  EXPECT_EQ(cluster.log_count("refused enqueue frame (worker keys may not enqueue) from key 'worker' (worker) (1 refusals in total"), 1u);
  EXPECT_EQ(cluster.log_count("from key 'producer' (producer)"), 1u);
}

// SIGHUP reloads the allow-list: a removed key loses access at its next
// request on the connection it already has; the keys still listed keep
// theirs, and a running worker keeps working.
TEST(Security, AReloadRemovesAKeyAtOnceAndKeepsTheOthersConnected) {
  Keys keys;
  Cluster cluster(keys.broker_args(), {}, keys.client("admin"));
  Client admin(cluster.endpoint(), keys.client("admin"));
  Client producer(cluster.endpoint(), keys.client("producer"));
  std::vector<std::string> argv = {bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "mail",
                                   "--exec", "t=true"};
  for (auto& a : keys.worker_args("worker")) argv.push_back(a);
  cluster.start_worker(argv);
  ASSERT_TRUE(cluster.wait_for_workers(1));
  ASSERT_TRUE(producer.enqueue({"mail", "t", "", "before", 0, 3}));
  ASSERT_TRUE(admin.stats());

  keys.write_allow_list({"admin", "worker"});
  cluster.broker().signal(SIGHUP);
  ASSERT_TRUE(eventually([&] { return cluster.log_count("allow-list") >= 2 && cluster.log_count("reloaded") >= 1; }, 5s));
  auto refused = producer.enqueue({"mail", "t", "", "after", 0, 3});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, "refused") << refused.error().message;
  ASSERT_TRUE(admin.stats()) << "a key still listed keeps its connection";
  auto later = admin.enqueue({"mail", "t", "", "by-admin", 0, 3});
  ASSERT_TRUE(later);
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("mail"); return s && s->done == 2; }, 15s));
  EXPECT_EQ(cluster.log_count("stopped heartbeating"), 0u);

  // A broken allow-list is not taken: the old one stays.
  { std::ofstream(keys.allow_list()) << "[[key]]\nname = 1\n"; }
  cluster.broker().signal(SIGHUP);
  ASSERT_TRUE(eventually([&] { return cluster.log_count("keeping the allow-list as it was") >= 1; }, 5s));
  EXPECT_TRUE(admin.stats());
}

// Rule: a key's capacity holds across all of its connections: three worker
// processes with one key of capacity 2 hold at most 2 jobs between them.
TEST(Security, AKeysCapacityHoldsAcrossAllItsConnections) {
  Keys keys;
  Cluster cluster(keys.broker_args(), {}, keys.client("admin"));
  const auto record = cluster.dir() / "starts.txt";
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> argv = {bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "mail",
                                     "--concurrency", "4", "--record", record.string()};
    for (auto& a : keys.worker_args("worker")) argv.push_back(a);
    cluster.start_worker(argv);
  }
  ASSERT_TRUE(cluster.wait_for_workers(3));
  Client producer(cluster.endpoint(), keys.client("producer"));
  std::vector<JobSpec> jobs;
  jobs.reserve(12);
  for (int i = 0; i < 12; ++i) jobs.push_back({"mail", "sleep", "300", fmt::format("capped-{}", i), 0, 3});
  ASSERT_TRUE(producer.enqueue_batch(jobs));
  int64_t most_in_flight = 0;
  ASSERT_TRUE(eventually([&] {
    auto s = cluster.stats("mail");
    if (!s) return false;
    most_in_flight = std::max(most_in_flight, s->in_flight);
    return s->done == 12;
  }, 60s));
  EXPECT_LE(most_in_flight, 2) << "the key's capacity is 2";
  EXPECT_GE(most_in_flight, 1);
}

// Rule: admin work has a share per key. A producer key's flood of lookups,
// each across 500 queues, takes at most its share of the waiting room, and
// the admin's audit sent while the flood is answered "overloaded" gets in.
TEST(Security, AProducersFloodOfLookupsLeavesRoomForTheAdmin) {
  Keys keys;
  keys.write_allow_list({"admin", "producer", "worker", "stranger"});
  Cluster cluster(keys.broker_args(), {}, keys.client("admin"));
  Client admin(cluster.endpoint(), keys.client("admin", 300'000));
  std::vector<JobSpec> jobs;
  jobs.reserve(500);
  for (int i = 0; i < 500; ++i) jobs.push_back({fmt::format("q{}", i), "t", "", "", 0, 3});
  ASSERT_TRUE(admin.enqueue_batch(jobs));

  CurvePeer flood(cluster.endpoint(), keys, "stranger", "flood");
  for (uint64_t id = 1; id <= 300; ++id) flood.send(proto::JobRequest{id, "no-such-job", ""});
  bool refused = false;
  ASSERT_TRUE(eventually([&] {
    for (const auto& frame : flood.receive_for(100ms))
      if (const auto* error = std::get_if<proto::ErrorFrame>(&frame); error != nullptr && error->code == "overloaded") refused = true;
    return refused;
  }, 30s)) << "the flood of lookups was never answered overloaded";
  auto audit = admin.admin({.op = "audit", .queue = "q0"});
  ASSERT_TRUE(audit) << audit.error().code << ": " << audit.error().message;
}

// Rule: a reload compares keys, not names. A name listed again with another
// public key takes access from the old key's open sessions at once and gives
// it to the new key.
TEST(Security, AReloadThatGivesANameAnotherKeyRevokesTheOldKeysSessions) {
  Keys keys;
  Cluster cluster(keys.broker_args(), {}, keys.client("admin"));
  Client producer(cluster.endpoint(), keys.client("producer"));
  ASSERT_TRUE(producer.enqueue({"mail", "t", "", "before", 0, 3}));

  keys.write_allow_list({"admin", "producer", "worker"}, {{"producer", "stranger"}});
  cluster.broker().signal(SIGHUP);
  ASSERT_TRUE(eventually([&] { return cluster.log_count("reloaded") >= 1; }, 5s));
  auto refused = producer.enqueue({"mail", "t", "", "after", 0, 3});
  ASSERT_FALSE(refused) << "the old key's session kept the name's grant";
  EXPECT_EQ(refused.error().code, "refused") << refused.error().message;
  Client replacement(cluster.endpoint(), keys.client("stranger"));
  auto accepted = replacement.enqueue({"mail", "t", "", "by-the-new-key", 0, 3});
  EXPECT_TRUE(accepted) << accepted.error().message;
  auto s = cluster.stats("mail");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->accepted, 2);
}

// Plaintext is only for this host: a broker asked to listen on a network
// address without CURVE refuses to start unless --insecure says so, and
// says at start which mode it is in.
TEST(Security, ABrokerRefusesAPlaintextNetworkPortUnlessInsecure) {
  RedisServer redis;
  const auto dir = make_temp_dir("insecure");
  const std::string listen = "tcp://0.0.0.0:" + std::to_string(free_port());
  Process refused({bin("dueq-broker"), "--redis", redis.url(), "--listen", listen}, (dir / "refused.log").string());
  EXPECT_EQ(refused.wait(), 2) << "a setting that cannot work is bad input";
  EXPECT_NE(read_file(dir / "refused.log").find("refusing to listen on " + listen + " without CURVE"), std::string::npos)
      << read_file(dir / "refused.log");
  {
    Process insecure({bin("dueq-broker"), "--redis", redis.url(), "--listen", listen, "--insecure"},
                     (dir / "insecure.log").string());
    EXPECT_TRUE(eventually([&] { return read_file(dir / "insecure.log").find("listening on") != std::string::npos; }, 20s))
        << read_file(dir / "insecure.log");
    EXPECT_NE(read_file(dir / "insecure.log").find("CURVE off: plaintext on " + listen + " (--insecure)"), std::string::npos);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// No secret key and no password appears in a log line, an error message or
// `dueq stats`: a run with CURVE keys from files and environment, and a
// broker given a bad Redis URL with a password.
TEST(Security, NoKeyOrPasswordAppearsInLogsErrorsOrStats) {
  Keys keys;
  std::string logs;
  {
    Cluster cluster(keys.broker_args(), {}, keys.client("admin"));
    Client producer(cluster.endpoint(), keys.client("producer"));
    ASSERT_TRUE(producer.enqueue({"mail", "noop", "", "k1", 0, 3}));
    Client stranger(cluster.endpoint(), keys.client("stranger", 300));
    EXPECT_FALSE(stranger.stats());
    std::vector<std::string> argv = {bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "mail"};
    for (auto& a : keys.worker_args("worker")) argv.push_back(a);
    cluster.start_worker(argv);
    ASSERT_TRUE(eventually([&] { auto s = cluster.stats("mail"); return s && s->done == 1; }, 15s));
    const std::string env = fmt::format("DUEQ_BROKER_KEY={} DUEQ_KEY={} ", keys.broker_pub(), keys.key_file("admin"));
    auto stats = ::popen((env + bin("dueq") + " --broker " + cluster.endpoint() + " stats 2>&1").c_str(), "r");
    ASSERT_NE(stats, nullptr);
    char buffer[4096];
    size_t n;
    std::string out;
    while ((n = fread(buffer, 1, sizeof buffer, stats)) > 0) out.append(buffer, n);
    EXPECT_EQ(::pclose(stats), 0) << out;
    EXPECT_NE(out.find("mail"), std::string::npos) << out;
    logs += out;
    logs += read_file(cluster.dir() / "broker.log") + read_file(cluster.dir() / "worker0.log");
  }
  const auto dir = make_temp_dir("password");
  Process bad_url({bin("dueq-broker"), "--redis", "redis://dueq:hunter2-secret@127.0.0.1:notaport", "--listen",
                   "tcp://127.0.0.1:" + std::to_string(free_port())},
                  (dir / "broker.log").string());
  EXPECT_NE(bad_url.wait(), 0);
  Process no_auth({bin("dueq-broker"), "--redis", "redis://dueq:hunter2-secret@127.0.0.1:1", "--listen",
                   "tcp://127.0.0.1:" + std::to_string(free_port())},
                  (dir / "broker2.log").string());
  ASSERT_TRUE(eventually([&] { return read_file(dir / "broker2.log").find("waiting for Redis") != std::string::npos; }, 10s));
  no_auth.signal(SIGTERM);
  EXPECT_EQ(no_auth.wait(), 0);
  logs += read_file(dir / "broker.log") + read_file(dir / "broker2.log");
  EXPECT_NE(logs.find("redis://dueq:***@"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("hunter2-secret"), std::string::npos);
  for (const char* name : {"broker", "admin", "producer", "worker", "stranger"})
    EXPECT_EQ(logs.find(keys.pair(name).secret_key), std::string::npos) << name << "'s secret key is in the logs";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

namespace {

struct TimedRun {
  int code = -1;
  std::string out;
  int64_t ms = 0;
};

// A key pair no broker uses, in `dir`: its public key file, given as a
// wrong broker key.
std::string write_other_key_pair(const TempDir& dir) {
  auto pair = generate_curve_key_pair();
  EXPECT_TRUE(pair);
  EXPECT_TRUE(write_curve_key_files((dir / "other").string(), *pair));
  return (dir / "other.pub").string();
}

TimedRun timed_dueq(const std::string& endpoint, const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  auto run = run_dueq(endpoint, args);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  return {run.code, run.out, ms};
}

}  // namespace

// Rule: the CLI tells apart what keeps it from a broker and says so within
// about 2 s (--connect-timeout), with its own exit code: a key not on the
// allow-list (77, at once), a wrong broker key and keys given to a broker
// without CURVE or none to one with it (78), a role that may not do what
// was asked (77, no advice to retry).
TEST(Security, TheCliTellsApartARefusedKeyAWrongBrokerKeyAndARefusedRole) {
  Keys keys;
  Cluster cluster(keys.broker_args(), {}, keys.client("admin"));
  const TempDir other_dir("other");
  const std::string other_broker_pub = write_other_key_pair(other_dir);
  auto with = [&](const std::string& broker_key, const std::string& key) {
    return fmt::format("--broker-key {} --key {} ", broker_key, key);
  };
  struct Case {
    const char* what;
    std::string args;
    int code;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"admin", with(keys.broker_pub(), keys.key_file("admin")) + "stats", 0, "workers registered"},
      {"stranger's key", with(keys.broker_pub(), keys.key_file("stranger")) + "stats", 77, "not on the broker's allow-list"},
      {"wrong broker key", with(other_broker_pub, keys.key_file("admin")) + "stats", 78, "is this broker's public key"},
      {"no keys", "stats", 78, "disagree on CURVE"},
      {"producer asks for stats", with(keys.broker_pub(), keys.key_file("producer")) + "stats", 77, "only admin keys"},
      {"producer enqueues to a queue not its own",
       with(keys.broker_pub(), keys.key_file("producer")) + "enqueue --queue other --type t", 77, "may not use queue"},
  };
  for (const auto& c : cases) {
    const auto run = timed_dueq(cluster.endpoint(), c.args);
    std::printf("[ cli      ] %-42s exit %d after %lld ms\n", c.what, run.code, static_cast<long long>(run.ms));
    EXPECT_EQ(run.code, c.code) << c.what << ": " << run.out;
    EXPECT_NE(run.out.find(c.says), std::string::npos) << c.what << ": " << run.out;
    EXPECT_EQ(run.out.find("retry"), std::string::npos) << c.what << ": no advice to retry: " << run.out;
    EXPECT_LT(run.ms, 8'000) << c.what << ": answered without waiting out the request's attempts (3 x 5 s)";
  }
}

// Rule: a worker says why it is not registered: at once when the broker
// refuses its key or its role, within a few seconds for a wrong broker key.
TEST(Security, AWorkerSaysWhyTheBrokerDoesNotTakeIt) {
  Keys keys;
  Cluster cluster(keys.broker_args(), {}, keys.client("admin"));
  const TempDir other_dir("other");
  const std::string other_broker_pub = write_other_key_pair(other_dir);
  struct Case {
    const char* name;
    std::vector<std::string> keys;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"stranger", {"--broker-key", keys.broker_pub(), "--key", keys.key_file("stranger")}, "refused this client's key"},
      {"wrongkey", {"--broker-key", other_broker_pub, "--key", keys.key_file("worker")}, "is this broker's public key"},
      {"producer", {"--broker-key", keys.broker_pub(), "--key", keys.key_file("producer")}, "refused this worker"},
      {"worker", {"--broker-key", keys.broker_pub(), "--key", keys.key_file("worker")}, "registered with broker"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {bin("dueq-worker"), "--broker", cluster.endpoint(), "--queue", "mail", "--exec", "*=/bin/true"};
    argv.insert(argv.end(), c.keys.begin(), c.keys.end());
    const auto log = cluster.dir() / (std::string(c.name) + ".log");
    Process worker(argv, log.string());
    EXPECT_TRUE(eventually([&] { return read_file(log).find(c.says) != std::string::npos; }, 10s))
        << c.name << ": " << read_file(log);
  }
}
