// The dueq command line: output, exit codes and input validation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

CliRun dueq_cli(const std::string& broker, const std::string& args, bool with_stderr = false) {
  return run_dueq(broker, args, with_stderr);
}

// `dueq ARGS` with no --broker put first, stderr with stdout.
CliRun dueq_raw(const std::string& args) {
  CliRun run{-1, ""};
  if (FILE* pipe = ::popen((bin("dueq") + " " + args + " 2>&1").c_str(), "r")) {
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) run.out.append(buffer, n);
    const int status = ::pclose(pipe);
    run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return run;
}

}  // namespace

TEST(Cli, EnqueuePrintsTheIdAndARetryWithTheSameIdMakesNoSecondJob) {
  Cluster cluster;
  auto first = dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --payload hi --delay 1h --id my-job");
  EXPECT_EQ(first.code, 0);
  EXPECT_EQ(first.out, "my-job\n");
  auto again = dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --payload hi --delay 1h --id my-job", true);
  EXPECT_EQ(again.code, 0);
  EXPECT_NE(again.out.find("already existed"), std::string::npos);
  auto generated = dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --payload hi --at 2030-01-01T00:00:00Z");
  EXPECT_EQ(generated.code, 0);
  EXPECT_EQ(generated.out.size(), 27u);  // 26-character id + newline

  auto stats = dueq_cli(cluster.endpoint(), "stats --json");
  ASSERT_EQ(stats.code, 0);
  auto json = nlohmann::json::parse(stats.out);
  ASSERT_EQ(json.size(), 1u);
  EXPECT_EQ(json[0]["queue"], "q");
  EXPECT_EQ(json[0]["scheduled"], 2);
  EXPECT_EQ(json[0]["accepted"], 2);

  auto job = dueq_cli(cluster.endpoint(), "job my-job --json");
  ASSERT_EQ(job.code, 0);
  auto j = nlohmann::json::parse(job.out);
  EXPECT_EQ(j["state"], "scheduled");
  EXPECT_EQ(j["payload"], "hi");
  EXPECT_EQ(j["queue"], "q");
}

TEST(Cli, EnqueueFromJsonLinesReportsCountsAndBadLines) {
  Cluster cluster;
  const auto file = cluster.dir() / "jobs.jsonl";
  std::ofstream(file) << R"({"queue":"q","type":"t","payload":"a","delay_ms":60000})" << "\n"
                      << R"({"queue":"q","type":"t","payload":{"k":1},"at_ms":1900000000000,"id":"x1"})" << "\n"
                      << R"({"queue":"q","type":"t","id":"x1"})" << "\n"
                      << "not json\n"
                      << R"({"queue":"q","type":"t","colour":"red"})" << "\n";
  auto run = dueq_cli(cluster.endpoint(), "enqueue --from " + file.string(), true);
  EXPECT_EQ(run.code, 2);  // some lines were rejected
  EXPECT_NE(run.out.find("accepted 2, duplicate 1, rejected 2"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(":4:"), std::string::npos) << "bad line number reported";
  EXPECT_NE(run.out.find("unknown field 'colour'"), std::string::npos);
}

// Batches from a file go out several at a time; when they fail, the id of
// every job sent (generated ones included) is shown, so a retry can reuse them.
TEST(Cli, AFileIsSentSeveralBatchesAtATimeAndAFailureNamesEveryIdSent) {
  const auto dir = make_temp_dir("cli");
  const auto file = dir / "jobs.jsonl";
  {
    std::ofstream out(file);
    for (int i = 0; i < 2'500; ++i) out << R"({"queue":"q","type":"t"})" << "\n";
  }
  const std::string nobody = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto run = run_dueq(nobody, "--timeout 200ms enqueue --from " + file.string(), true);
  EXPECT_EQ(run.code, 75) << run.out.substr(0, 500);
  std::set<std::string> ids, lines;
  std::istringstream text(run.out);
  for (std::string line; std::getline(text, line);) {
    const auto id_at = line.find(": id "), unknown_at = line.find(" (outcome unknown)");
    if (id_at == std::string::npos || unknown_at == std::string::npos) continue;
    lines.insert(line.substr(0, id_at));
    ids.insert(line.substr(id_at + 5, unknown_at - id_at - 5));
  }
  EXPECT_EQ(lines.size(), 2'500u) << "every line sent is named";
  EXPECT_EQ(ids.size(), 2'500u) << "each with its own id";
  std::filesystem::remove_all(dir);
}

// A done job shows its whole document while its queue's history keeps it
// (who ran it, when it started); in a queue that keeps no history, only its
// id and finish time, and `dueq job` says so instead of "attempt 0 of 0"
// and empty fields.
TEST(Cli, ADoneJobShowsWhatIsKnownOfIt) {
  Cluster cluster;
  const auto config = cluster.dir() / "broker.toml";
  std::ofstream(config) << "[defaults]\nhistory_retention = \"1h\"\n[queues.bare]\nhistory_retention = \"0s\"\n";
  cluster.start_broker({"--config", config.string()});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "q", "--queue", "bare"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  ASSERT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type noop --id finished").code, 0);
  ASSERT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue bare --type noop --id forgotten").code, 0);
  ASSERT_TRUE(eventually([&] {
    auto q = cluster.stats("q"), bare = cluster.stats("bare");
    return q && q->done == 1 && bare && bare->done == 1;
  }, std::chrono::seconds(10)));
  auto kept = dueq_cli(cluster.endpoint(), "job finished");
  EXPECT_EQ(kept.code, 0) << kept.out;
  for (const char* line : {"state:        done", "type:         noop", "attempt:      1 of 5", "started:", "worker:", "finished:"})
    EXPECT_NE(kept.out.find(line), std::string::npos) << line << "\n" << kept.out;
  auto shown = dueq_cli(cluster.endpoint(), "job forgotten");
  EXPECT_EQ(shown.code, 0) << shown.out;
  EXPECT_NE(shown.out.find("state:        done"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("finished:"), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out.find("attempt:"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("no longer kept"), std::string::npos) << shown.out;
  auto json = nlohmann::json::parse(dueq_cli(cluster.endpoint(), "job forgotten --json").out);
  EXPECT_EQ(json["state"], "done");
  EXPECT_TRUE(json["attempt"].is_null()) << json.dump();
  EXPECT_GT(json["finished_ms"].get<int64_t>(), 0);
}

TEST(Cli, BadFlagsAreUsageErrorsAndChangeNothing) {
  Cluster cluster;
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --delay soon").code, 2);
  // 30 what? Once read as 30 ms, which ran a job meant for later at once.
  auto unitless = dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --delay 30", true);
  EXPECT_EQ(unitless.code, 2);
  EXPECT_NE(unitless.out.find("no unit: use ms, s, m, h or d"), std::string::npos) << unitless.out;
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --at yesterday").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --delay 1s --at-ms 5").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue 'bad queue' --type t").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --type t").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --backoff-base soon").code, 2);
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "frobnicate").code, 2);
  EXPECT_EQ(cluster.queue_keys(), "");
}

TEST(Cli, UnknownJobIsNotFoundAndNoBrokerIsATemporaryFailure) {
  Cluster cluster;
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "job no-such-job").code, 3);
  // Every id is answered; one the broker does not know makes it exit 3.
  ASSERT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --delay 1h --id later").code, 0);
  auto cancelled = dueq_cli(cluster.endpoint(), "cancel later no-such-job");
  EXPECT_EQ(cancelled.code, 3) << cancelled.out;
  EXPECT_NE(cancelled.out.find("later: cancelled"), std::string::npos) << cancelled.out;
  EXPECT_NE(cancelled.out.find("no-such-job: not found"), std::string::npos) << cancelled.out;
  EXPECT_EQ(dueq_cli(cluster.endpoint(), "cancel no-such-job --json").code, 3);
  const std::string nobody = "tcp://127.0.0.1:" + std::to_string(free_port());
  EXPECT_EQ(dueq_cli(nobody, "--timeout 200ms stats").code, 75);
}

// Rule: connection options work after the command too, a mistyped command
// is named with the nearest one (exit 2, nothing sent), and --version
// answers without a broker.
TEST(Cli, OptionsAfterTheCommandTyposAndVersion) {
  Cluster cluster;
  auto after = dueq_raw("stats --json --broker " + cluster.endpoint() + " --timeout 5s");
  EXPECT_EQ(after.code, 0) << after.out;
  EXPECT_TRUE(nlohmann::json::parse(after.out).is_array()) << after.out;
  auto typo = dueq_raw("--broker " + cluster.endpoint() + " enqeue --queue q --type t");
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.out.find("no command 'enqeue'; did you mean 'enqueue'?"), std::string::npos) << typo.out;
  auto far = dueq_raw("frobnicate");
  EXPECT_EQ(far.code, 2);
  EXPECT_NE(far.out.find("no command 'frobnicate' (dueq --help lists them)"), std::string::npos) << far.out;
  EXPECT_EQ(cluster.queue_keys(), "");
  auto version = dueq_raw("--version");
  EXPECT_EQ(version.code, 0);
  EXPECT_TRUE(version.out.starts_with("dueq 0.")) << version.out;
  EXPECT_NE(version.out.find("(commit "), std::string::npos) << version.out;
  for (const char* program : {"dueq-broker", "dueq-worker", "dueq-example-worker"}) {
    const std::string out = command_output(bin(program) + " --version");
    EXPECT_TRUE(out.starts_with(std::string(program) + " 0.")) << out;
  }
}

// Rule: `dueq workers` lists each worker with its host, pid, queues and
// weights, capacity, the jobs it holds and for how long, and when it was
// last heard from; --json has the same fields.
TEST(Cli, WorkersListsEachWorkerAndTheJobsItHolds) {
  Cluster cluster;
  cluster.start_worker({bin("dueq-worker"), "--broker", cluster.endpoint(), "--worker-id", "listed-1", "--queue", "w:3",
                        "--queue", "other", "--concurrency", "2", "--exec", "slow=sleep 20"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  ASSERT_EQ(dueq_cli(cluster.endpoint(), "enqueue --queue w --type slow --id long-1").code, 0);
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("w"); return s && s->in_flight == 1; }, 10s));
  // A running job's document and its row in a listing name its worker and
  // when it was sent (the leading broker's memory: Redis holds neither).
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch()).count();
  const auto doc = nlohmann::json::parse(dueq_cli(cluster.endpoint(), "job long-1 --json").out, nullptr, false);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["state"], "running") << doc.dump();
  EXPECT_EQ(doc["worker"], "listed-1") << doc.dump();
  ASSERT_TRUE(doc["started_ms"].is_number()) << doc.dump();
  EXPECT_GT(doc["started_ms"].get<int64_t>(), now_ms - 60'000) << doc.dump();
  EXPECT_LE(doc["started_ms"].get<int64_t>(), now_ms + 5'000) << doc.dump();
  const auto page = nlohmann::json::parse(dueq_cli(cluster.endpoint(), "list w --state running --json").out, nullptr, false);
  ASSERT_TRUE(page.is_object());
  ASSERT_EQ(page["rows"].size(), 1u) << page.dump();
  EXPECT_EQ(page["rows"][0]["worker"], "listed-1") << page.dump();
  EXPECT_EQ(page["rows"][0]["started_ms"], doc["started_ms"]) << page.dump();
  auto listed = dueq_cli(cluster.endpoint(), "workers");
  EXPECT_EQ(listed.code, 0) << listed.out;
  EXPECT_NE(listed.out.find("listed-1 on "), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("queues w:3,other:1, capacity "), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("holds 1, heard from "), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("w/long-1 held "), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("1 workers"), std::string::npos) << listed.out;
  // One listing per 100 ms: the next one may be told to wait (exit 75).
  nlohmann::json json;
  ASSERT_TRUE(eventually([&] {
    auto run = dueq_cli(cluster.endpoint(), "workers --json");
    if (run.code == 0) json = nlohmann::json::parse(run.out);
    return run.code == 0;
  }, 5s));
  ASSERT_EQ(json["rows"].size(), 1u) << json.dump();
  EXPECT_EQ(json["rows"][0]["worker"], "listed-1");
  EXPECT_EQ(json["rows"][0]["held"], "1");
  EXPECT_GT(std::stoi(json["rows"][0]["pid"].get<std::string>()), 0);
  // One listing per 100 ms walks the deliveries: a peer asking without end
  // is told to wait, and then answered.
  Client client(cluster.endpoint(), ClientOptions{.timeout_ms = 2000, .attempts = 1});
  size_t overloaded = 0, answered = 0, other = 0;
  EXPECT_TRUE(eventually([&] {
    auto r = client.admin(AdminCommand{"workers", "", {}, 0, 0});
    if (r) ++answered;
    else if (r.error().code == "overloaded" && r.error().retry_after_ms > 0 && r.error().retry_after_ms <= 100) ++overloaded;
    else ++other;
    return answered >= 2 && overloaded >= 2;
  }, 10s, 1ms)) << answered << " answered, " << overloaded << " told to wait";
  EXPECT_EQ(other, 0u);
}

// Rule: with no broker listening the CLI says so within about 2 s
// (--connect-timeout) and exits 75; input it can check itself is refused
// before any network call, exit 2, without mentioning the network.
TEST(Cli, NoBrokerIsNamedAtOnceAndBadInputIsRefusedBeforeConnecting) {
  const std::string nobody = "tcp://127.0.0.1:" + std::to_string(free_port());
  // All at once: each waits out its connect timeout alone.
  struct Timed {
    CliRun run;
    long long ms = 0;
  };
  const std::vector<const char*> commands = {"stats", "top --frames 1", "enqueue --queue q --type t", "job some-id",
                                             "dead list", "cancel some-id", "audit"};
  std::vector<std::future<Timed>> runs;
  runs.reserve(commands.size());
  for (const char* args : commands)
    runs.push_back(std::async(std::launch::async, [&nobody, args] {
      const auto t0 = std::chrono::steady_clock::now();
      Timed timed{dueq_cli(nobody, args, true), 0};
      timed.ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
      return timed;
    }));
  for (size_t i = 0; i < commands.size(); ++i) {
    const char* args = commands[i];
    const Timed timed = runs[i].get();
    std::printf("[ cli      ] no broker, dueq %-28s exit %d after %lld ms\n", args, timed.run.code, timed.ms);
    EXPECT_EQ(timed.run.code, 75) << args << ": " << timed.run.out;
    EXPECT_NE(timed.run.out.find("nothing listens at " + nobody), std::string::npos) << args << ": " << timed.run.out;
    EXPECT_LT(timed.ms, 8'000) << args;
  }
  for (const char* args : {"enqueue --queue 'bad queue' --type t", "enqueue --queue q --type 'a b'",
                           "enqueue --queue q --type t --id 'x y'", "job 'x y'", "cancel --queue 'a b' x",
                           "dead list --queue 'a b'", "enqueue --from /no/such/file", "--timeout 0s stats",
                           "top --interval 10ms"}) {
    const auto run = dueq_cli(nobody, args, true);
    EXPECT_EQ(run.code, 2) << args << ": " << run.out;
    EXPECT_EQ(run.out.find("nothing listens"), std::string::npos) << args << ": checked before connecting: " << run.out;
  }
}

// Rule: every command prints JSON with --json.
TEST(Cli, EveryCommandPrintsJson) {
  Cluster cluster;
  const auto enqueued = nlohmann::json::parse(dueq_cli(cluster.endpoint(), "enqueue --queue q --type t --id j1 --delay 1h --json", false).out);
  EXPECT_EQ(enqueued["id"], "j1");
  EXPECT_EQ(enqueued["status"], "accepted");
  const auto stats = nlohmann::json::parse(dueq_cli(cluster.endpoint(), "stats --json", false).out);
  EXPECT_EQ(stats[0]["scheduled"], 1);
  const auto top = nlohmann::json::parse(dueq_cli(cluster.endpoint(), "top --frames 1 --json", false).out);
  EXPECT_EQ(top["queues"][0]["queue"], "q");
  const auto cancelled = nlohmann::json::parse(dueq_cli(cluster.endpoint(), "cancel j1 --json", false).out);
  EXPECT_EQ(cancelled["rows"][0]["id"], "j1");
  const auto dir = make_temp_dir("keygen");
  const auto keygen = nlohmann::json::parse(dueq_cli(cluster.endpoint(), "keygen " + (dir / "k").string() + " --json", false).out);
  EXPECT_EQ(keygen["public_key"].get<std::string>().size(), 40u);
  std::filesystem::remove_all(dir);
  for (const char* args : {"job j1 --json", "dead list --json", "audit --json", "dead replay --all --queue q --json",
                           "dead purge --older-than 1d --json"}) {
    const auto run = dueq_cli(cluster.endpoint(), args, false);
    EXPECT_EQ(run.code, 0) << args;
    EXPECT_FALSE(nlohmann::json::parse(run.out, nullptr, false).is_discarded()) << args << ": " << run.out;
  }
}

// Rule: `dueq top` redraws every queue's counts and rates in a terminal and
// ends on q (run in tmux: send-keys, capture-pane).
TEST(Cli, TopShowsTheQueuesLiveInATerminalAndQuitsOnQ) {
  Cluster cluster;
  cluster.start_example_worker("live", 4, (cluster.dir() / "starts.txt").string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 30; ++i) jobs.push_back({"live", "noop", "", fmt::format("t{}", i), 0, 0});
  jobs.push_back({"waiting", "noop", "", "later", Client::in_ms(3'600'000), 0});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  const std::string session = fmt::format("dueq-top-{}", ::getpid());
  const std::string socket = (cluster.dir() / "tmux.sock").string();
  auto tmux = [&](const std::string& args) { return command_output("tmux -S " + socket + " " + args + " 2>&1"); };
  tmux(fmt::format("new-session -d -s {} -x 160 -y 30 '{} --broker {} top --interval 200ms; sleep 30'", session,
                   bin("dueq"), cluster.endpoint()));
  std::string screen;
  EXPECT_TRUE(eventually([&] {
    screen = tmux("capture-pane -p -t " + session);
    return screen.find("live") != std::string::npos && screen.find("waiting") != std::string::npos &&
           screen.find("workers 1") != std::string::npos;
  }, 10s)) << screen;
  // The done count reaches 30 on the screen as the jobs run.
  EXPECT_TRUE(eventually([&] {
    screen = tmux("capture-pane -p -t " + session);
    std::istringstream lines(screen);
    std::string line;
    while (std::getline(lines, line))
      if (line.starts_with("live ")) {
        std::istringstream fields(line);
        std::string name, scheduled, ready, in_flight, done_rate, enq_rate, late, done;
        fields >> name >> scheduled >> ready >> in_flight >> done_rate >> enq_rate >> late >> done;
        return done == "30";
      }
    return false;
  }, 10s)) << screen;
  std::ofstream(cluster.dir() / "top.txt") << screen;
  tmux("send-keys -t " + session + " q");
  // dueq top ends; the shell's sleep keeps the pane open.
  std::string running;
  EXPECT_TRUE(eventually([&] {
    running = tmux("display-message -p -t " + session + " '#{pane_current_command}'");
    return running == "sleep";
  }, 5s)) << running;
  tmux("kill-server");
}

// Rule: a service that accepts the connection and closes it at once (not a
// ZeroMQ peer) is named as not a dueq broker, not as a wrong broker key,
// when the client has no keys; exit 78 (it may yet be a broker with CURVE:
// its close can come before the mismatch is reported).
TEST(Cli, AServiceThatAcceptsAndClosesIsNamedAndNoBrokerKeyIsBlamed) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::atomic<bool> stop{false};
  std::thread closer([&] {
    while (!stop) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        const int fd = ::accept(listener, nullptr, nullptr);
        if (fd >= 0) ::close(fd);
      }
    }
  });
  const auto run = dueq_cli(fmt::format("tcp://127.0.0.1:{}", ntohs(addr.sin_port)), "--connect-timeout 1s stats", true);
  stop = true;
  closer.join();
  ::close(listener);
  EXPECT_EQ(run.code, 78) << run.out;
  EXPECT_NE(run.out.find("it is not a dueq broker"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("--broker-key (DUEQ_BROKER_KEY) is this"), std::string::npos) << "no broker key to blame: " << run.out;
}
