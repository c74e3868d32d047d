#pragma once
// Every Redis key dueq uses is built here. Keys of one queue share the hash
// tag {queue}, so a queue's scripts touch one cluster slot.
#include <string>

namespace dueq::broker {

struct QueueKeys {
  explicit QueueKeys(const std::string& queue)
      : scheduled("dueq:{" + queue + "}:scheduled"),
        ready("dueq:{" + queue + "}:ready"),
        leased("dueq:{" + queue + "}:leased"),
        dead("dueq:{" + queue + "}:dead"),
        stats("dueq:{" + queue + "}:stats"),
        job_prefix("dueq:{" + queue + "}:j:") {}

  std::string job(const std::string& id) const { return job_prefix + id; }

  std::string scheduled;   // zset id -> due ms
  std::string ready;       // zset id -> due ms: due, waiting for a worker
  std::string leased;      // zset id -> lease deadline ms
  std::string dead;        // zset id -> time of death ms
  std::string stats;       // hash of counters
  std::string job_prefix;  // + id -> job hash
};

// The set of queue names the broker has seen (for restarts and `dueq stats`).
inline const std::string kQueuesKey = "dueq:queues";

}  // namespace dueq::broker
