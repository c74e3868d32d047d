#include "tests/nemesis/schedule.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <random>

namespace dueq::nemesis {

namespace {

// std::uniform_int_distribution is not the same on every standard library;
// the schedule must be, so draws are made by hand from mt19937_64's output.
int64_t between(std::mt19937_64& rng, int64_t low, int64_t high) {
  return low + static_cast<int64_t>(rng() % static_cast<uint64_t>(high - low + 1));
}

template <typename T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& from) {
  return from[static_cast<size_t>(between(rng, 0, static_cast<int64_t>(from.size()) - 1))];
}

void shuffle(std::mt19937_64& rng, std::vector<std::string>& v) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(between(rng, 0, static_cast<int64_t>(i) - 1))]);
}

// One to three of `targets` on side a; side b is every other node (and the
// host) or, one time in three, one to three of them.
void draw_partition(std::mt19937_64& rng, std::vector<std::string> targets, const std::vector<std::string>& everyone, Fault& f) {
  shuffle(rng, targets);
  // Never every node on side a (a small topology's): someone is cut off.
  const int64_t most = std::clamp<int64_t>(static_cast<int64_t>(targets.size()) - 1, 1, 3);
  const auto a = static_cast<size_t>(between(rng, 1, most));
  f.side_a.assign(targets.begin(), targets.begin() + static_cast<std::ptrdiff_t>(a));
  std::vector<std::string> rest;
  for (const auto& node : everyone)
    if (std::find(f.side_a.begin(), f.side_a.end(), node) == f.side_a.end()) rest.push_back(node);
  shuffle(rng, rest);
  if (between(rng, 0, 2) == 0 && !rest.empty()) {
    // No more than there are (a small topology such as --embedded's).
    rest.resize(std::min(rest.size(), static_cast<size_t>(between(rng, 1, 3))));
  } else {
    rest.emplace_back("host");
  }
  f.side_b = std::move(rest);
  f.one_way = between(rng, 0, 3) == 0;
}

// What a pause or a kill may hit: every node, and an embedded store.
std::vector<std::string> process_targets(const Nodes& nodes) {
  std::vector<std::string> out = nodes.all();
  out.insert(out.end(), nodes.stores.begin(), nodes.stores.end());
  return out;
}

// `linked` from the whole topology: a broker's link to Redis is no fault of
// the store's.
Fault draw_one(std::mt19937_64& rng, const Nodes& nodes, const std::vector<std::string>& everyone,
               const std::vector<std::string>& linked) {
  Fault f;
  const int64_t roll = between(rng, 0, 99);
  f.for_ms = between(rng, 1'000, 8'000);
  if (roll < 28) {
    f.kind = FaultKind::partition;
    draw_partition(rng, nodes.all(), everyone, f);
  } else if (roll < 44) {
    f.kind = FaultKind::pause;
    f.target = pick(rng, process_targets(nodes));
  } else if (roll < 51) {
    f.kind = FaultKind::slow;
    f.target = pick(rng, linked);
    f.delay_ms = between(rng, 1, 300);
    f.jitter_ms = between(rng, 0, 200);
    f.loss_permille = static_cast<int>(between(rng, 0, 100));
  } else if (roll < 58) {
    f.kind = FaultKind::hold;
    f.target = pick(rng, linked);
  } else if (roll < 75) {
    f.kind = FaultKind::kill;
    f.target = pick(rng, process_targets(nodes));
    f.for_ms = between(rng, 200, 3'000);
  } else if (roll < 80) {
    f.kind = FaultKind::disk;
    std::vector<std::string> stores = nodes.redis;
    stores.insert(stores.end(), nodes.stores.begin(), nodes.stores.end());
    if (!stores.empty()) f.target = pick(rng, stores);  // none: left out by the caller
    f.for_ms = between(rng, 2'000, 8'000);
  } else if (roll < 86) {
    f.kind = FaultKind::failover;
  } else if (roll < 92) {
    f.kind = FaultKind::demote;
  } else {
    f.kind = FaultKind::clock;
    f.target = pick(rng, nodes.brokers);
    f.shift_ms = between(rng, 1'000, 10'000) * (between(rng, 0, 1) == 0 ? 1 : -1);
  }
  return f;
}

}  // namespace

const char* name_of(FaultKind kind) {
  switch (kind) {
    case FaultKind::partition: return "partition";
    case FaultKind::pause: return "pause";
    case FaultKind::kill: return "kill";
    case FaultKind::failover: return "failover";
    case FaultKind::demote: return "demote";
    case FaultKind::clock: return "clock";
    case FaultKind::stop: return "stop";
    case FaultKind::slow: return "slow";
    case FaultKind::hold: return "hold";
    case FaultKind::disk: return "disk";
    case FaultKind::move: return "move";
  }
  return "?";
}

std::vector<std::string> Nodes::linked() const {
  std::vector<std::string> out = redis.empty() ? std::vector<std::string>{} : brokers;
  out.insert(out.end(), workers.begin(), workers.end());
  return out;
}

std::vector<std::string> Nodes::all() const {
  std::vector<std::string> out;
  for (const auto* group : {&brokers, &redis, &sentinels, &workers}) out.insert(out.end(), group->begin(), group->end());
  return out;
}

std::string Fault::describe() const {
  switch (kind) {
    case FaultKind::partition:
      return fmt::format("partition {} {} {}", fmt::join(side_a, ","), one_way ? "-/->" : "<-/->", fmt::join(side_b, ","));
    case FaultKind::pause: return "pause " + target;
    case FaultKind::kill: return "kill " + target;
    case FaultKind::failover: return "failover";
    case FaultKind::demote: return target.empty() ? "demote master" : "demote " + target;
    case FaultKind::clock: return fmt::format("clock of {} {:+} ms", target, shift_ms);
    case FaultKind::stop: return "stop " + target;
    case FaultKind::slow:
      return fmt::format("slow links of {} ({} ms + up to {} ms, {}.{}% stalled)", target, delay_ms, jitter_ms,
                         loss_permille / 10, loss_permille % 10);
    case FaultKind::hold:
      return "hold bytes from " + target + (marker.empty() ? "" : " (from the first that carry '" + marker + "')");
    case FaultKind::disk: return "fill the disk of " + target;
    case FaultKind::move: return "move the master and its address to " + target;
  }
  return "?";
}

std::optional<FaultKind> fault_kind_named(const std::string& name) {
  for (const FaultKind kind : {FaultKind::partition, FaultKind::pause, FaultKind::kill, FaultKind::failover,
                               FaultKind::demote, FaultKind::clock, FaultKind::stop, FaultKind::slow, FaultKind::hold, FaultKind::disk})
    if (name == name_of(kind)) return kind;
  return std::nullopt;
}

std::vector<Fault> draw_schedule(uint64_t seed, int64_t length_ms, const Nodes& nodes, bool store_faults,
                                 const std::vector<FaultKind>& only) {
  std::mt19937_64 rng(seed);
  std::vector<Fault> schedule;
  Nodes targets = nodes;
  if (!store_faults) {
    targets.redis.clear();
    targets.stores.clear();
  }
  // A fail-over or a demotion needs Redis nodes of the network's own; a
  // Redis Cluster's masters are not demoted by hand.
  const auto store_switch = [&](const Fault& f) {
    return ((!store_faults || nodes.redis.empty()) && (f.kind == FaultKind::failover || f.kind == FaultKind::demote)) ||
           (nodes.cluster && f.kind == FaultKind::demote);
  };
  const auto left_out = [&](const Fault& f) {
    return store_switch(f) || (f.kind == FaultKind::disk && f.target.empty()) || (!only.empty() && std::find(only.begin(), only.end(), f.kind) == only.end());
  };
  // Kinds none of which can be drawn here (a stop, or only store switches
  // where there are none) make an empty schedule rather than an endless draw.
  if (!only.empty() && std::all_of(only.begin(), only.end(), [&](FaultKind kind) {
        Fault f;
        f.kind = kind;
        return kind == FaultKind::stop || store_switch(f) ||
               (kind == FaultKind::disk && targets.redis.empty() && targets.stores.empty());
      }))
    return schedule;
  int64_t at = between(rng, 2'000, 4'000);
  while (true) {
    Fault f = draw_one(rng, targets, nodes.all(), nodes.linked());
    while (left_out(f)) f = draw_one(rng, targets, nodes.all(), nodes.linked());
    f.at_ms = at;
    if (at + f.for_ms > length_ms) break;
    at += f.for_ms + between(rng, 1'000, 4'000);
    schedule.push_back(std::move(f));
  }
  return schedule;
}

namespace {

Fault fault_on(FaultKind kind, std::string target, int64_t at_ms, int64_t for_ms, int64_t shift_ms = 0) {
  Fault f;
  f.kind = kind;
  f.target = std::move(target);
  f.at_ms = at_ms;
  f.for_ms = for_ms;
  f.shift_ms = shift_ms;
  return f;
}

Fault slow_links_of(std::string target, int64_t at_ms, int64_t for_ms, int64_t delay_ms) {
  Fault f = fault_on(FaultKind::slow, std::move(target), at_ms, for_ms);
  f.delay_ms = delay_ms;
  return f;
}

// The leader's bytes held from its first round that carries a job of
// `queue` (workload.cpp names a new queue's jobs QUEUE:N.).
Fault hold_from_first_job_of(const std::string& queue, int64_t at_ms, int64_t for_ms) {
  Fault f = fault_on(FaultKind::hold, kLeader, at_ms, for_ms);
  f.marker = queue + ":";
  return f;
}

// `a` and `b` cut from each other (a node, a role, or "host": the producers
// and the operator).
Fault cut_off(std::string a, std::string b, int64_t at_ms, int64_t for_ms) {
  Fault f = fault_on(FaultKind::partition, "", at_ms, for_ms);
  f.side_a = {std::move(a)};
  f.side_b = {std::move(b)};
  return f;
}

}  // namespace

const std::vector<NamedSchedule>& named_schedules() {
  static const std::vector<NamedSchedule> all = {
      // The leader's lease is made longer than the pause, so that the
      // standby does not take over: the leader itself wakes up to workers
      // whose heartbeats wait unread in its socket.
      {"paused-leader",
       "a broker paused past the worker timeout declared every worker dead when it woke up, and ran their jobs again",
       30'000,
       {fault_on(FaultKind::pause, kLeader, 8'000, 1'800), fault_on(FaultKind::pause, kLeader, 16'000, 1'800)},
       {"leader_lease = \"10s\""},
       {"pause"}},
      // The standby's wall clock runs 60 s ahead (past the 10 s lease_ttl)
      // when the leader is killed and it takes over: leases must run on
      // one clock, and the running jobs' workers hand them to it. Jobs it
      // starts early meanwhile are counted apart.
      {"standby-clock-ahead",
       "a standby whose clock ran ahead of its predecessor's took every running job's lease for lapsed and ran it again",
       30'000,
       {fault_on(FaultKind::clock, kStandby, 6'000, 16'000, 60'000), fault_on(FaultKind::kill, kLeader, 10'000, 4'000)},
       {},
       {"kill"}},
      // The brokers are given one address, not the sentinels' (redis0's,
      // which their proxies point elsewhere as a virtual address or a DNS
      // name moves). The master is switched over to a replica under their
      // open connections and the address moves with it; switched back when
      // it heals; twice. A leader must drop its connection to the demoted
      // master and reach the new one within recover_ms.
      {"demoted-master",
       "a master demoted under an open connection kept a zombie leader that answered READONLY and held every worker, "
       "while the address it was given led to the new master",
       40'000,
       {fault_on(FaultKind::move, "redis1", 6'000, 16'000), fault_on(FaultKind::move, "redis2", 28'000, 8'000)},
       {},
       {},
       true,
       false,
       {},
       0,
       {"move"},
       8'000},
      // One broker on its embedded store; the store's redis-server is
      // killed, and every restart the broker makes is killed again as soon
      // as its pid file names it (while it loads, or before it serves),
      // for 6 s; then once more, briefly.
      {"embedded-store-kept-down",
       "an embedded Redis whose restart died before it served was never started again: the supervisor waited on a pid "
       "it had already reaped, until the broker itself restarted",
       30'000,
       {fault_on(FaultKind::kill, "store0", 8'000, 6'000), fault_on(FaultKind::kill, "store0", 20'000, 300)},
       {},
       {},
       false,
       true},
      // A producer sends one batch to a queue no job went to before, and
      // the leader's bytes to Redis are held in its link from the round that
      // carries it (its registration and first writes) for about 8 s: its
      // 2 s lease lapses and the standby takes over, and the held round
      // reaches Redis, when released, after the successor read the queue
      // list (a job due now would be leased at once in that round, to the
      // worker of the new queues). The producers cannot reach the standby
      // until 1 s after the release, so a retry of that batch comes to the
      // successor only then, and nothing else goes to that queue. Twice:
      // the second new queue's producer gives up after its one try (as one
      // that died would), so no retry writes to that queue and a job the
      // held round left there runs only if the successor finds the queue.
      {"late-bytes-new-queue",
       "a cut-off leader's held round registered a new queue and leased a job in it after its successor had read the "
       "queue list, and no leader ever ran the jobs it left there",
       40'000,
       {hold_from_first_job_of("nemesis-late1", 9'000, 8'000), cut_off(kStandby, "host", 9'000, 9'000),
        fault_on(FaultKind::stop, "worker3", 24'000, 12'000), hold_from_first_job_of("nemesis-late2", 25'000, 8'000),
        cut_off(kStandby, "host", 25'000, 9'000)},
       {},
       {},
       false,
       false,
       {{9'500, "nemesis-late1"}, {25'500, "nemesis-late2", true}}},
      // 20,000 queues in the store, both brokers' links to Redis 1 ms
      // slower each way, and the leader killed: the standby must take over
      // (read every queue) without letting its 2 s lease lapse, and serve
      // within 10 s of the kill (recover_ms: no job waits past that).
      {"take-over-20000-queues",
       "with 20,000 queues behind a slow link a take-over outlasted the lease, and the brokers deposed each other while "
       "they started, accepting nothing",
       40'000,
       {slow_links_of(kLeader, 4'000, 34'000, 1), slow_links_of(kStandby, 4'000, 34'000, 1),
        fault_on(FaultKind::kill, kLeader, 12'000, 3'000)},
       {"max_queues = 25000"},
       {},
       false,
       false,
       {},
       20'000,
       {"kill", "slow"},
       10'000},
  };
  return all;
}

const NamedSchedule* find_named_schedule(const std::string& name) {
  for (const auto& s : named_schedules())
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace dueq::nemesis
