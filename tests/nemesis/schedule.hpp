#pragma once
// A nemesis run's faults, drawn from its seed before the run starts: the
// same seed and length give the same schedule, printed on failure and
// replayed by `make nemesis SEED=n`. Faults follow one another (each heals
// before the next begins), so that every start again has one fault to blame.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dueq::nemesis {

enum class FaultKind {
  partition,  // side_a cut from side_b (both ways, or only a -> b)
  pause,      // SIGSTOP of target, SIGCONT when it heals
  kill,       // SIGKILL of target, started again when it heals (Redis from its AOF)
  failover,   // SENTINEL FAILOVER: the master changes under open connections
  demote,     // REPLICAOF on the master (or target), under open connections; undone when it heals
  clock,      // target's wall clock stepped by shift_ms, and back when it heals
  stop,       // SIGTERM of target (a clean stop), started again when it heals
  slow,       // target's links (a broker's to Redis, a worker's to the brokers) delayed, jittered, lossy
  hold,       // the bytes target sends on its links held in them, delivered when it heals
  disk,       // target's (a Redis node's or an embedded store's) data directory filled up, emptied when it heals
  // Under a plain URL: the master switched over to target, a replica (the old
  // one demoted under open connections and cut off from it), and the
  // brokers' address re-pointed to it, as a virtual address or DNS name
  // moves; switched back when it heals. Named schedules only: nothing draws it.
  move,
};

// A target named by role, resolved when the fault begins: the broker that
// leads then, or the one standing by.
inline const char* const kLeader = "leader";
inline const char* const kStandby = "standby";

struct Fault {
  int64_t at_ms = 0;   // from the start of the schedule
  int64_t for_ms = 0;  // until it heals
  FaultKind kind = FaultKind::pause;
  std::string target;                      // pause, kill, stop, clock (a node, kLeader or kStandby)
  std::vector<std::string> side_a, side_b;  // partition
  bool one_way = false;                    // partition: only a -> b is cut
  int64_t shift_ms = 0;                    // clock: forward (> 0) or back
  int64_t delay_ms = 0, jitter_ms = 0;     // slow: each chunk's delay, and up to this more
  int loss_permille = 0;                   // slow: chunks stalled as long as a retransmission
  std::string marker;                      // hold: from the first bytes that carry it, not at once
  std::string describe() const;
};

// The nodes a schedule picks from, by name ("broker0", "redis1", ...);
// "host" is where producers and the operator run.
struct Nodes {
  std::vector<std::string> brokers, redis, sentinels, workers;
  // An embedded store's redis-server ("store0"), the broker's child: no
  // node of the network of its own (it listens on a unix socket), so it
  // is only paused or killed, and not in all().
  std::vector<std::string> stores;
  // The Redis nodes are a Redis Cluster: fail-overs, but no demotion.
  bool cluster = false;
  std::vector<std::string> all() const;
  // The nodes whose links run through a proxy (deployment.hpp): the
  // brokers, when they reach Redis over the network, and the workers.
  std::vector<std::string> linked() const;
};

// With `store_faults` false, the Redis nodes are no fault's target and no
// fail-over or demotion is drawn: the store never loses a write it
// acknowledged (a Sentinel fail-over can, docs/failure-modes.md).
// With `only` not empty, only faults of those kinds are drawn (a run per
// fault class, for its own figures).
std::vector<Fault> draw_schedule(uint64_t seed, int64_t length_ms, const Nodes& nodes, bool store_faults = true,
                                 const std::vector<FaultKind>& only = {});

const char* name_of(FaultKind kind);
// The kind name_of() names; nullopt for any other text.
std::optional<FaultKind> fault_kind_named(const std::string& name);

// A schedule written for one failure found by reading the code, played by
// `nemesis_run --schedule NAME` (docs/failure-modes.md, "Named schedules").
// Its faults may overlap. Besides every rule of the checker, the fault
// kinds in `explains_no_rerun` explain no start again: the failure showed
// as jobs run twice.
struct NamedSchedule {
  std::string name;
  std::string failure;  // what went wrong before the fix, in a line
  int64_t length_ms = 0;
  std::vector<Fault> faults;
  std::vector<std::string> broker_config;  // lines added to the brokers' TOML
  std::vector<std::string> explains_no_rerun;
  bool plain_url = false;  // brokers given redis://redis0 instead of the sentinels
  bool embedded = false;   // one broker on its embedded store (deployment.hpp)
  // Queues the workload sends one batch to, each at its ms from the start
  // (a producer of their own); the workers serve them from the start.
  struct NewQueue {
    int64_t at_ms = 0;
    std::string name;
    bool asked_once = false;  // its producer gives up after one unanswered try
  };
  std::vector<NewQueue> new_queues;
  // Queues registered in the store before the run (names only, no job), so
  // that a take-over has that many to read.
  int preload_queues = 0;
  // Kinds the system is to carry on through: they excuse a late start only
  // for recover_ms (if > 0, instead of the checker's default) from when
  // they begin, not for their whole span.
  std::vector<std::string> explains_no_delay;
  int64_t recover_ms = 0;
};

const std::vector<NamedSchedule>& named_schedules();
const NamedSchedule* find_named_schedule(const std::string& name);

}  // namespace dueq::nemesis
