// A nemesis run: the topology of deployment.hpp in network namespaces, the
// workload of workload.hpp, and a fault schedule drawn from the seed
// (schedule.hpp) played against them; then, once every fault has healed and
// every job has reached its end, the history is read back by the checker
// (checker.hpp), which prints the figures and each promise that broke. The
// run's directory is kept when it fails, with the history and every log;
// `nemesis_check DIR` checks it again.
//
//   nemesis_run --seed 7 --duration 10m
//
// Exit 0: the checker passed; 1: it did not (or the run could not settle);
// 2: bad flags; 77: skipped (no root or no namespaces here).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <random>
#include <thread>

#include "common/clock.hpp"
#include "common/duration.hpp"
#include "dueq/client.hpp"
#include "tests/nemesis/checker.hpp"
#include "tests/nemesis/deployment.hpp"
#include "tests/nemesis/workload.hpp"
#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::nemesis;
using namespace std::chrono_literals;

namespace {

constexpr int kSkipped = 77;

// A fault whose target names a node (or a role resolved to one).
bool targets_a_node(FaultKind kind) {
  return kind == FaultKind::pause || kind == FaultKind::stop || kind == FaultKind::clock || kind == FaultKind::kill ||
         kind == FaultKind::slow || kind == FaultKind::hold || kind == FaultKind::disk;
}

struct Run {
  Deployment& deployment;
  Network& net;
  Workload& workload;
  std::filesystem::path dir;
  std::string demoted = {};  // the master a demote fault turned into a replica

  // Waits until `until_ms` on the steady clock, starting again workers that
  // crashed.
  void wait_until(int64_t until_ms) {
    while (steady_ms() < until_ms) {
      deployment.tend();
      std::this_thread::sleep_for(100ms);
    }
  }

  // A role (kLeader, kStandby) named just before the fault begins
  // (kResolveAheadMs), as the lease on the master says; a node name stays
  // as it is.
  static constexpr int64_t kResolveAheadMs = 200;
  std::string resolve(const std::string& target) const {
    if (target != kLeader && target != kStandby) return target;
    std::string leader = deployment.leader();
    if (target == kLeader) return leader;
    for (const auto& b : deployment.nodes().brokers)
      if (b != leader) return b;
    return "";
  }

  void begin(const Fault& f) {
    switch (f.kind) {
      case FaultKind::partition:
        for (const auto& node : f.side_a) net.cut(node, f.side_b, true, !f.one_way);
        break;
      case FaultKind::pause: deployment.signal(f.target, SIGSTOP); break;
      case FaultKind::kill: deployment.kill(f.target); break;
      case FaultKind::stop: deployment.stop(f.target); break;
      case FaultKind::failover: deployment.fail_over(); break;
      case FaultKind::clock: deployment.shift_clock(f.target, f.shift_ms); break;
      case FaultKind::slow: deployment.slow_links(f.target, f.delay_ms, f.jitter_ms, f.loss_permille); break;
      case FaultKind::hold: deployment.hold_links(f.target, true, f.marker); break;
      case FaultKind::disk: deployment.fill_disk(f.target); break;
      case FaultKind::move: deployment.move_master(f.target); break;
      case FaultKind::demote: {
        demoted = f.target.empty() ? deployment.master() : f.target;
        if (demoted.empty()) break;
        const auto& redis = deployment.nodes().redis;
        const std::string to = demoted == redis[0] ? redis[1] : redis[0];
        deployment.cli(demoted, "REPLICAOF " + net.ip(to) + " 6379");
        break;
      }
    }
  }

  void end(const Fault& f) {
    switch (f.kind) {
      case FaultKind::partition: net.heal(); break;
      case FaultKind::pause: deployment.signal(f.target, SIGCONT); break;
      case FaultKind::kill:
      case FaultKind::stop: deployment.start(f.target); break;
      case FaultKind::failover: break;
      case FaultKind::clock: deployment.shift_clock(f.target, 0); break;
      case FaultKind::slow: deployment.slow_links(f.target, 0, 0, 0); break;
      // The bytes held go on now: those of connections their sender gave
      // up on too, late.
      case FaultKind::hold: deployment.hold_links(f.target, false); break;
      case FaultKind::disk: deployment.empty_disk(f.target); break;
      case FaultKind::move: deployment.move_master(deployment.nodes().redis[0]); break;
      case FaultKind::demote:
        // The operator undoes it, unless the sentinels have chosen another
        // master meanwhile.
        if (!demoted.empty() && deployment.master() == demoted) deployment.cli(demoted, "REPLICAOF NO ONE");
        break;
    }
  }

  // Plays every fault's beginning and end in time order (a named
  // schedule's faults may overlap); each is recorded in faults.tsv as it
  // heals, with its role resolved to the node it hit.
  void play(const std::vector<Fault>& schedule, int64_t started_ms, int64_t length_ms) {
    struct Step {
      int64_t at_ms;
      size_t fault;
      bool begins;
    };
    std::vector<Step> steps;
    for (size_t i = 0; i < schedule.size(); ++i) {
      steps.push_back({schedule[i].at_ms, i, true});
      steps.push_back({schedule[i].at_ms + schedule[i].for_ms, i, false});
    }
    std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.at_ms < b.at_ms; });
    std::vector<Fault> played = schedule;
    std::vector<int64_t> from(schedule.size(), 0);
    for (const auto& step : steps) {
      Fault& f = played[step.fault];
      if (step.begins) {
        // Roles are looked up (asking the brokers) before the fault's
        // time, so that it begins on time.
        wait_until(started_ms + step.at_ms - kResolveAheadMs);
        f.target = resolve(f.target);
        for (auto* side : {&f.side_a, &f.side_b})
          for (auto& node : *side) node = resolve(node);
      }
      wait_until(started_ms + step.at_ms);
      const bool hits_nothing = f.target.empty() && targets_a_node(f.kind);
      if (!step.begins) {
        if (!hits_nothing) end(f);
        append_line(dir / "faults.tsv", {std::to_string(from[step.fault]), std::to_string(wall_ms()), name_of(f.kind),
                                         f.describe(), std::to_string(f.shift_ms)});
        continue;
      }
      from[step.fault] = wall_ms();
      fmt::print("{:7.1f} s  {} for {} ms\n", static_cast<double>(f.at_ms) / 1000, f.describe(), f.for_ms);
      std::fflush(stdout);
      if (f.target.empty() && targets_a_node(f.kind)) {
        fmt::print("           (no node held that role: nothing done)\n");
        continue;
      }
      if (f.kind == FaultKind::disk && !deployment.has_disk(f.target)) fmt::print("           (no tmpfs there: nothing done)\n");
      begin(f);
    }
    wait_until(started_ms + length_ms);
  }

  // Everything healed: no rule, no stopped or killed process, one master.
  void heal_all() {
    net.heal();
    deployment.heal_links();
    std::vector<std::string> everything = deployment.nodes().all();
    everything.insert(everything.end(), deployment.nodes().stores.begin(), deployment.nodes().stores.end());
    for (const auto& node : everything) {
      if (node.starts_with("broker")) deployment.shift_clock(node, 0);
      deployment.signal(node, SIGCONT);
      if (deployment.is_down(node)) deployment.start(node);
    }
    if (!deployment.ensure_master()) fmt::print("no Redis master served 50 s after the faults healed\n");
  }
};

// Until no job of the run's queues is scheduled, waiting or running; the
// wall ms it happened, or -1. (A queue the leader does not know shows in no
// stats: its jobs are found out of reach by the lookups after.)
// Stats list every queue of the store, spaced 50 us per queue by the
// broker: a store with 20,000 takes seconds to answer.
constexpr int kStatsTimeoutMs = 20'000;

int64_t wait_settled(Deployment& deployment, const std::vector<std::string>& queues, std::chrono::milliseconds bound) {
  Client client(deployment.broker_endpoints(), ClientOptions{.timeout_ms = kStatsTimeoutMs, .attempts = 1});
  const bool settled = dueq::testing::eventually([&] {
    deployment.tend();
    auto stats = client.stats();
    if (!stats) return false;
    bool main_queue_seen = false;
    for (const auto& q : *stats) {
      if (std::find(queues.begin(), queues.end(), q.queue) == queues.end()) continue;
      main_queue_seen = main_queue_seen || q.queue == queues.front();
      if (q.scheduled != 0 || q.waiting != 0 || q.in_flight != 0) return false;
    }
    return main_queue_seen;
  }, bound, 250ms);
  return settled ? wall_ms() : -1;
}

// The workload's periodic entry: a tick every 2 s into the run's queue,
// added before the faults begin and removed once they healed.
constexpr const char* kTickEntry = "nemesis-tick";
constexpr int64_t kTickEveryMs = 2'000;

// `dueq ARGS` until it succeeds, for at most 30 s.
bool dueq_until_done(const std::string& endpoints, const std::string& args) {
  return dueq::testing::eventually([&] { return dueq::testing::run_dueq(endpoints, "--timeout 5s " + args).code == 0; }, 30s,
                                   500ms);
}

std::string tick_id(int64_t due_ms) {
  const time_t seconds = due_ms / 1000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return fmt::format("{}@{}", kTickEntry, text);
}

// Each tick the entry owed, from when it was added until its removal, and
// each it enqueued around those (while the add ran, and ahead until the
// removal plus the lookahead and any forward clock step), into ticks.tsv; those the broker knows go into accepted.tsv as jobs due
// at their tick, and those it shows cancelled that fell due after the
// removal into cancels.tsv (the removal cancels the ticks enqueued ahead).
struct Span {
  int64_t from_ms = 0, to_ms = 0;
};

// `added`: from when the add was asked until it returned (a tick in it may
// exist; one after it is owed); `removed`: from the removal's return until
// the last tick that may have been enqueued ahead. A tick due after the
// removal was asked (`remove_asked_ms`) may have been cancelled by it: a
// removal cancels the ticks it finds not yet run, however little before
// it they were due.
void record_ticks(const std::filesystem::path& dir, const std::string& endpoints, const std::string& queue, Span added,
                  Span removed, int64_t remove_asked_ms) {
  Client client(endpoints, ClientOptions{.timeout_ms = 3000, .attempts = 3});
  const int64_t removed_ms = removed.from_ms;
  for (int64_t due = (added.from_ms / kTickEveryMs + 1) * kTickEveryMs; due <= removed.to_ms; due += kTickEveryMs) {
    const std::string id = tick_id(due);
    auto fields = client.job(id, queue);
    const bool found = fields && fields->has_value();
    // Not owed: due before the add returned, or after the entry was gone.
    if (!found && (due <= added.to_ms || due > removed_ms)) continue;
    append_line(dir / "ticks.tsv", {id, std::to_string(due), found ? "found" : "missing"});
    if (!found) continue;
    append_line(dir / "accepted.tsv", {id, "noop", std::to_string(due), "0", "accepted", std::to_string(wall_ms()), queue});
    if ((**fields)["s"] == "cancelled" && due > remove_asked_ms) append_line(dir / "cancels.tsv", {id});
  }
}

// Each accepted job, and each job of a flow or batch, as the broker shows
// it now, into final.tsv.
void record_finals(const std::filesystem::path& dir, const std::string& endpoints, const std::string& main_queue,
                   const std::string& flow_queue) {
  std::string error;
  auto history = read_history(dir, error);
  if (!history) return;
  Client client(endpoints, ClientOptions{.timeout_ms = 3000, .attempts = 3});
  std::ofstream out(dir / "final.tsv");
  std::vector<AcceptedJob> jobs = history->accepted;
  for (const auto& g : history->group_jobs) jobs.push_back(AcceptedJob{.id = g.id, .queue = flow_queue});
  for (const auto& job : jobs) {
    const std::string& queue = job.queue.empty() ? main_queue : job.queue;
    auto fields = client.job(job.id, queue);
    for (int retry = 0; !fields && retry < 10; ++retry) {
      std::this_thread::sleep_for(500ms);
      fields = client.job(job.id, queue);
    }
    if (!fields) {
      // The broker cannot answer (the run stalled): the jobs left out of
      // final.tsv are lost to the checker, and the run ends in a minute
      // rather than in hours of lookups.
      fmt::print("lookup of {} failed: {}; no lookups after it\n", job.id, fields.error().message);
      return;
    }
    std::map<std::string, std::string> f = fields->value_or(std::map<std::string, std::string>{});
    out << job.id << '\t' << f["s"] << '\t' << (f["f"].empty() ? "0" : f["f"]) << '\t' << hex(f["e"]) << '\t'
        << hex(f["t"]) << '\t' << (f["a"].empty() ? "0" : f["a"]) << '\n';
  }
}

// For a job the broker shows neither ended nor waiting when the run is
// over: its lease as the master holds it, into stuck.txt (read by hand when
// the checker reports a stall).
void record_stuck(const std::filesystem::path& dir, Deployment& deployment, const std::vector<std::string>& queues) {
  const std::string master = deployment.master();
  if (master.empty()) return;
  std::ifstream finals(dir / "final.tsv");
  std::ofstream out(dir / "stuck.txt");
  out << "master " << master << ", TIME " << deployment.cli(master, "TIME") << '\n';
  for (std::string line; std::getline(finals, line);) {
    const std::string id = line.substr(0, line.find('\t'));
    if (line.find("\tleased\t") == std::string::npos) continue;
    for (const auto& queue : queues) {
      const auto ask = [&](const char* command, const char* key) {
        return deployment.cli(master, fmt::format("{} 'dueq:{{{}}}:{}' {}", command, queue, key, id));
      };
      out << id << " in " << queue << ": deadline " << ask("ZSCORE", "leased") << ", token " << ask("HGET", "tokens")
          << ", started " << ask("SISMEMBER", "started") << '\n';
    }
  }
}

// The audit of each of the run's queues (not of queues a schedule only
// registered), and their counters summed.
void record_facts(const std::filesystem::path& dir, Deployment& deployment, const std::vector<std::string>& queues,
                  std::map<std::string, int64_t> facts) {
  std::ofstream audits(dir / "audit.txt");
  facts["audit"] = 0;
  Client client(deployment.broker_endpoints(), ClientOptions{.timeout_ms = kStatsTimeoutMs, .attempts = 3});
  auto stats = client.stats();
  for (const auto& queue : queues) {
    // A queue deleted at the end (the transient one) has nothing to audit.
    if (stats && std::none_of(stats->begin(), stats->end(), [&](const auto& q) { return q.queue == queue; })) continue;
    const auto audit = dueq::testing::run_dueq(deployment.broker_endpoints(), "--timeout 60s audit --queue " + queue);
    audits << audit.out;
    if (audit.code != 0) facts["audit"] = audit.code;
  }
  // The flows queue's counters apart: its jobs are in groups.tsv, not
  // accepted.tsv (flow_groups.hpp checks them).
  if (stats)
    for (const auto& q : *stats)
      if (std::find(queues.begin(), queues.end(), q.queue) != queues.end()) {
        const std::string prefix = q.queue.ends_with("-flows") ? "flow_stats_" : "stats_";
        for (const auto& [name, value] : {std::pair<const char*, int64_t>{"done", q.done}, {"dead", q.dead},
                                          {"cancelled", q.cancelled}, {"accepted", q.accepted},
                                          {"in_flight", q.in_flight}, {"stale_acks", q.stale_acks}})
          facts[prefix + name] += value;
      }
  facts["broker_peak_rss_kb"] = deployment.broker_peak_rss_kb();
  facts["redis_peak_bytes"] = deployment.redis_peak_bytes();
  for (const auto& [name, value] : facts) append_line(dir / "facts.tsv", {name, std::to_string(value)});
}

// `count` idle queues registered in the store (names only), as an
// operator's store with that many would hold; false when the master
// refused. Also in the set brokers read before the leader's slot held it
// (dueq:queues, which a take-over moves), so that `--broker-bin` with an
// older broker reads them too.
bool preload_queues(Deployment& deployment, int count) {
  const std::string master = deployment.master();
  for (int first = 0; first < count; first += 1'000) {
    std::string names;
    for (int i = first; i < std::min(count, first + 1'000); ++i) names += fmt::format(" idle-{:05}", i);
    for (const char* set : {"dueq:{leader}:queues", "dueq:queues"})
      if (master.empty() || deployment.cli(master, std::string("SADD ") + set + names).find("ERR") != std::string::npos)
        return false;
  }
  return true;
}

std::string named_list() {
  std::string out;
  for (const auto& s : named_schedules()) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  std::string duration_text = "60s";
  Topology topology;
  topology.bin_dir = dueq::testing::bin("");
  topology.source_dir = DUEQ_SOURCE_DIR;
  CLI::App app{"nemesis_run: a seeded schedule of partitions, pauses, kills and fail-overs against real processes"};
  app.add_option("--seed", seed, "seed of the fault schedule, the job mix and the operator");
  app.add_option("--duration", duration_text, "how long faults are played, e.g. 60s or 10m");
  app.add_option("--cpp-workers", topology.cpp_workers, "dueq-example-worker processes")->check(CLI::Range(1, 8));
  app.add_flag("!--no-python-worker", topology.python_worker, "leave the Python worker out");
  int batch = 5;
  app.add_option("--batch", batch, "jobs each of the two producers enqueues every 100 ms")->check(CLI::Range(1, 100));
  bool store_faults = true;
  app.add_flag("!--no-store-faults", store_faults,
               "no fault on the Redis nodes and no fail-over or demotion: the store loses no acknowledged write");
  app.add_flag("--cluster", topology.cluster,
               "the store a Redis Cluster of three masters with a replica each (no sentinels); a fail-over is CLUSTER "
               "FAILOVER on a replica, and no master is demoted");
  app.add_flag("--embedded", topology.embedded,
               "one broker on its embedded store (no Redis nodes, sentinels or standby); its redis-server is paused "
               "and killed like any node");
  std::vector<std::string> only_names;
  app.add_option("--faults", only_names, "draw only faults of these kinds (partition, pause, kill, failover, demote, clock, slow, hold, disk)")
      ->delimiter(',');
  std::string schedule_name;
  app.add_option("--schedule", schedule_name,
                 "play a named schedule instead of a drawn one (docs/failure-modes.md, \"Named schedules\"): " + named_list());
  app.add_option("--broker-bin", topology.broker_bin, "the dueq-broker to run (another build's, to see a fix matter)")
      ->check(CLI::ExistingFile);
  bool keep = false;
  app.add_flag("--keep", keep, "keep the run's directory (history and logs) when it passes too");
  CLI11_PARSE(app, argc, argv);
  const NamedSchedule* named = nullptr;
  if (!schedule_name.empty()) {
    named = find_named_schedule(schedule_name);
    if (named == nullptr) {
      fmt::print(stderr, "--schedule: no schedule named '{}' (there are: {})\n", schedule_name, named_list());
      return 2;
    }
    duration_text = fmt::format("{}s", named->length_ms / 1000);
    topology.broker_config = named->broker_config;
    topology.plain_url = named->plain_url;
    topology.embedded = named->embedded;
    for (const auto& q : named->new_queues) topology.new_queues.push_back(q.name);
  }
  std::vector<FaultKind> only;
  for (const auto& name : only_names) {
    const auto kind = fault_kind_named(name);
    if (!kind || *kind == FaultKind::stop) {
      fmt::print(stderr, "--faults: '{}' is not a kind a schedule draws\n", name);
      return 2;
    }
    only.push_back(*kind);
  }
  const auto length_ms = parse_duration_ms(duration_text);
  if (!length_ms || *length_ms < 10'000) {
    fmt::print(stderr, "--duration: at least 10s\n");
    return 2;
  }

  Network net;
  if (!net.available()) {
    fmt::print("nemesis: SKIPPED: {}\n", net.why_not());
    return kSkipped;
  }
  const auto dir = dueq::testing::make_temp_dir("nemesis");
  Deployment deployment(net, dir, topology);
  if (std::string why; !deployment.start_all(why)) {
    fmt::print("nemesis: SKIPPED: {}\n", why);
    return kSkipped;
  }
  const auto schedule = named != nullptr ? named->faults : draw_schedule(seed, *length_ms, deployment.nodes(), store_faults, only);
  if (named != nullptr) {
    std::ofstream(dir / "schedule.txt") << named->name << '\n';
    fmt::print("nemesis: schedule '{}' (before its fix, {}), seed {} for the workload\n", named->name, named->failure, seed);
  }
  fmt::print("nemesis: seed {}, {} of faults ({} of them{}), history and logs in {}\n", seed, duration_text, schedule.size(),
             store_faults ? "" : ", none on the store", dir.string());
  Client probe(deployment.broker_endpoints(), ClientOptions{.timeout_ms = 1000, .attempts = 1});
  const auto workers_joined = [&] {
    auto s = probe.broker_stats();
    return s && s->workers >= deployment.nodes().workers.size();
  };
  if (!dueq::testing::eventually([&] { return deployment.sentinels_ready(); }, 60s, 250ms) ||
      !dueq::testing::eventually(workers_joined, 60s, 250ms)) {
    fmt::print("nemesis: FAIL: the sentinels did not agree or the workers did not join within 60 s; logs in {}\n", dir.string());
    return 1;
  }

  if (named != nullptr && named->preload_queues > 0 && !preload_queues(deployment, named->preload_queues)) {
    fmt::print("nemesis: FAIL: {} queues could not be registered; logs in {}\n", named->preload_queues, dir.string());
    return 1;
  }
  // Every job falls due before the schedule ends, so that the run settles
  // soon after the last fault heals.
  WorkloadOptions work{.endpoints = deployment.broker_endpoints(), .queue = topology.queue, .seed = seed, .batch = batch,
                       .due_horizon_ms = std::min<int64_t>(20'000, *length_ms / 3), .last_due_ms = wall_ms() + *length_ms,
                       .ordered_queue = topology.ordered_queue(), .fair_queue = topology.fair_queue(),
                       .flow_queue = topology.flow_queue()};
  const int64_t ticks_asked_ms = wall_ms();
  if (!dueq_until_done(deployment.broker_endpoints(),
                       fmt::format("cron add {} --schedule '*/2 * * * * *' --queue {} --type noop", kTickEntry, topology.queue))) {
    fmt::print("nemesis: FAIL: the periodic entry could not be added in 30 s; logs in {}\n", dir.string());
    return 1;
  }
  // Ticks after the add returned are owed (it enqueues those after the
  // broker's "now" as it ran); those since it was asked may exist.
  const int64_t ticks_added_ms = wall_ms();
  // A schedule's new queues on the clock its faults start on (the
  // workload's threads take some ms to start: the same instant for both).
  const int64_t started_steady_ms = steady_ms();
  const int64_t started_wall_ms = wall_ms();
  if (named != nullptr)
    for (const auto& q : named->new_queues) work.new_queues.push_back({started_wall_ms + q.at_ms, q.name, q.asked_once});
  Workload workload(dir, work);
  Run run{deployment, net, workload, dir, {}};
  run.play(schedule, started_steady_ms, *length_ms);
  workload.stop();
  run.heal_all();
  workload.close_batches_left_open();
  const int64_t healed_ms = wall_ms();
  const int64_t ticks_remove_asked_ms = wall_ms();
  const bool ticks_removed = dueq_until_done(deployment.broker_endpoints(), fmt::format("cron remove {}", kTickEntry));
  const int64_t ticks_removed_ms = wall_ms();
  Bounds bounds = bounds_for(schedule_name);
  bounds.documents_kept = topology.broker_bin.empty();
  const int64_t settled_ms = wait_settled(deployment, topology.queues(), std::chrono::milliseconds(bounds.settle_ms + 60'000));

  int64_t ahead_ms = 3'000;  // the lookahead, and the furthest a leader's clock ran ahead
  for (const auto& f : schedule)
    if (f.kind == FaultKind::clock) ahead_ms = std::max(ahead_ms, 3'000 + f.shift_ms);
  record_ticks(dir, deployment.broker_endpoints(), topology.queue, {ticks_asked_ms, ticks_added_ms},
               {ticks_removed_ms, ticks_removed_ms + ahead_ms}, ticks_remove_asked_ms);
  record_finals(dir, deployment.broker_endpoints(), topology.queue, topology.flow_queue());
  record_stuck(dir, deployment, topology.queues());
  std::map<std::string, int64_t> facts{{"seed", static_cast<int64_t>(seed)}, {"healed_ms", healed_ms},
                                       {"rejected", static_cast<int64_t>(workload.rejected())}};
  if (settled_ms > 0) facts["settled_ms"] = settled_ms;
  facts["ticks_added_ms"] = ticks_added_ms;
  facts["ticks_removed_ms"] = ticks_removed_ms;
  record_facts(dir, deployment, topology.queues(), facts);

  std::string error;
  auto history = read_history(dir, error);
  if (!history) {
    fmt::print("nemesis: FAIL: {}\n", error);
    return 1;
  }
  Verdict verdict = check(*history, bounds);
  if (!ticks_removed) verdict.violations.push_back("run: the periodic entry could not be removed in 30 s");
  if (workload.rejected() > 0) verdict.violations.push_back(fmt::format("{} valid jobs were rejected", workload.rejected()));
  fmt::print("{}", verdict.report());
  // A figure, not a check: how often a worker was sent a delivery it had
  // already (protocol.md 3.3 has it ignore the copy).
  size_t resent = 0;
  for (const auto& worker : deployment.nodes().workers)
    resent += dueq::testing::count_of(dueq::testing::read_file(dir / (worker + ".log")), "delivered again with the same token");
  fmt::print("deliveries a worker was sent again with the same token (ignored): {}\n", resent);
  if (!verdict.violations.empty()) {
    if (named != nullptr)
      fmt::print("nemesis: FAIL with schedule '{}' (make nemesis-named SCHEDULE={}); the schedule:\n", named->name, named->name);
    else
      fmt::print("nemesis: FAIL with seed {} (make nemesis SEED={} MINUTES=...); the schedule:\n", seed, seed);
    for (const auto& f : schedule) fmt::print("  at {} ms for {} ms: {}\n", f.at_ms, f.for_ms, f.describe());
    fmt::print("history and logs kept in {}\n", dir.string());
    return 1;
  }
  deployment.stop_all();
  std::error_code ec;
  if (!keep) std::filesystem::remove_all(dir, ec);
  fmt::print("nemesis: PASS ({})\n", named != nullptr ? "schedule " + named->name : fmt::format("seed {}", seed));
  return 0;
}
