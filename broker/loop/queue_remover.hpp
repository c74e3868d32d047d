#pragma once
// `dueq queue delete NAME` (the ADMIN operation queue_delete): an empty
// queue's keys and its registration removed by one call (delete_queue.lua)
// in the loop's own rounds, so that it is ordered with the enqueues around
// it: one sent before it makes the queue non-empty and the delete is
// refused; one built while it is in flight registers the queue again first
// (QueueState::deleting, Enqueuer::ready_for_writes). A queue a periodic
// entry enqueues into is refused, and so is every delete behind a Redis
// Cluster (the registry lives in another slot there).
#include <deque>
#include <functional>
#include <string>

#include "broker/loop/outbox.hpp"
#include "broker/loop/queues.hpp"
#include "broker/loop/registry.hpp"
#include "broker/store/round.hpp"

namespace dueq::broker {

namespace calls {
Command delete_queue(const std::string& queue);
}  // namespace calls

// lua/delete_queue.lua's status.
enum class DeleteQueueStatus : int64_t { not_empty = 0, deleted = 1 };
struct DeleteQueueOutcome {
  DeleteQueueStatus status = DeleteQueueStatus::not_empty;
  int64_t scheduled = 0, ready = 0, running = 0, dead = 0;  // not_empty: what it holds
};
namespace calls {
Result<DeleteQueueOutcome> parse_delete_queue(const redisReply* reply);
}  // namespace calls

class QueueRemover {
 public:
  // `periodic_entry`: the name of the periodic entry that enqueues into a
  // queue, "" for none (CronScheduler::entry_for).
  using PeriodicEntry = std::function<std::string(const std::string& queue)>;
  QueueRemover(QueueTable& queues, const WorkerRegistry& workers, PeriodicEntry periodic_entry, Outbox& outbox)
      : queues_(queues), workers_(workers), periodic_entry_(std::move(periodic_entry)), outbox_(outbox) {}

  void use_cluster(bool cluster) { cluster_ = cluster; }
  void on_request(const Peer& peer, uint64_t request_id, const std::string& queue);
  bool has_work() const { return !pending_.empty(); }
  void add_to(Round& round);

 private:
  struct Request {
    Peer peer;
    uint64_t request_id = 0;
    std::string queue;
  };
  void on_reply(const Request& request, const redisReply* reply);
  void refuse(const Request& request, const char* code, const std::string& why);

  QueueTable& queues_;
  const WorkerRegistry& workers_;
  PeriodicEntry periodic_entry_;
  Outbox& outbox_;
  bool cluster_ = false;
  std::deque<Request> pending_;
};

}  // namespace dueq::broker
