#pragma once
// The nemesis workload: producers on the host enqueue batches of jobs with
// unique ids, due from now to `due_horizon_ms` ahead, to both brokers: most
// succeed at once, some sleep, some always fail (two attempts), a few are
// poison (they kill their worker). A batch is asked again with the same ids
// until the broker answers, for at most 20 s; jobs still unanswered then
// are recorded as of unknown outcome. Every answer goes to accepted.tsv.
// Jobs go to one queue, and at times a schedule sets one batch to a new one.
#include <atomic>
#include <climits>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dueq/client.hpp"

namespace dueq::nemesis {

struct WorkloadOptions {
  std::string endpoints;
  std::string queue = "nemesis";
  uint64_t seed = 1;
  int producers = 2;
  int batch = 5;               // jobs per batch; a batch every 100 ms per producer
  int64_t due_horizon_ms = 20'000;
  int64_t last_due_ms = INT64_MAX;  // wall ms: no job is due later (the run settles sooner)
  // Queues no job went to before: at its wall ms, a producer of its own
  // sends one batch to each (its first enqueue registers it, at a moment a
  // schedule chose) and nothing else goes there.
  struct NewQueue {
    int64_t at_ms = 0;  // wall ms
    std::string name;
    // The batch is sent once and not asked again (a producer that died or
    // gave up): what is unanswered is of unknown outcome at once, so no
    // retry through the successor writes to the queue.
    bool asked_once = false;
  };
  std::vector<NewQueue> new_queues;
  // An ordered queue (docs/keys.md), "" for none: a producer of its own
  // sends it batches of jobs with keys (keys.tsv).
  std::string ordered_queue;
  // A fair queue (docs/keys.md), "" for none: a producer of its own sends
  // it jobs of one busy key and a few light ones.
  std::string fair_queue;
  // A queue of flows and batches (docs/flows.md), "" for none: a producer
  // of its own sends it a flow or a batch every 400 ms (groups.tsv).
  std::string flow_queue;
};

class Workload {
 public:
  Workload(std::filesystem::path dir, WorkloadOptions options);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  // Asks the producers to stop and waits for their last batch.
  void stop();
  // Once faults healed: each batch whose closing request went unanswered
  // is closed (`Client::close_batch`, for up to 30 s), so that the run
  // settles; what it was is still unknown to the checker.
  void close_batches_left_open();

  size_t accepted() const { return accepted_count_; }
  size_t rejected() const { return rejected_; }

 private:
  void produce(int producer);
  // Now and then (one in 40 tenths of a second), an operator cancel of an
  // accepted job not due for another second or more, recorded in
  // cancels.tsv before it is asked: on a thread of its own, so that an
  // answer slow in coming (a broker cut off) delays no fault.
  void operate();
  // Each asks what a `dueq` command asks, through `admin`.
  void cancel_one(Client& admin, std::mt19937_64& rng);
  // Half by id (`dueq job reschedule`), half through a bulk action.
  void reschedule_one(Client& admin, std::mt19937_64& rng);
  // A waiting sleep job's payload to kEditedPayload (`dueq job edit`).
  void edit_one(Client& admin, std::mt19937_64& rng);
  // A search of the scheduled state by type (the type index) for a job
  // waiting 3 s or more ahead that no operator touched; searches.tsv
  // records whether an answered search found it.
  void search_one(Client& admin, std::mt19937_64& rng);
  void sample_progress(Client& admin);
  struct Cancellable {
    std::string id, queue, type;
    int64_t due_ms = 0;
  };
  // A job accepted and due `ahead_ms` or more from now, of those an
  // operator may still cancel or reschedule: taken from them (`take`), or
  // left there.
  std::optional<Cancellable> waiting_job(std::mt19937_64& rng, int64_t ahead_ms, bool take = true);
  // The transient queue deleted (`dueq queue delete`); deletes.tsv names it when it landed.
  void delete_transient_queue(Client& admin);
  // A job every 400 ms to the transient queue (`<queue>-transient`), due
  // within 1.5 s, of a type that succeeds: the queue empties now and then,
  // and the operator's deletes race its enqueues.
  void produce_transient();
  std::string transient_queue() const { return options_.queue + "-transient"; }
  // One batch to new queue `q`, at its time (a thread and a connection of
  // its own, so that batches due a few ms apart go out so).
  void produce_new_queue(size_t q);
  // Every 150 ms, three jobs of the ordered queue, each with one of six
  // keys, running kOrderedRunMs (history.hpp), due now or within 3 s; each
  // id's key goes to keys.tsv before the batch is asked.
  void produce_ordered();
  void produce_fair();
  void produce_unique();
  // Flows (a root, two or three children, some with children of their own;
  // noop, sleep or fail jobs under every failure policy) and batches (two
  // callbacks, two members, then two more with the close), alternately;
  // each request asked again with the same ids until answered.
  void produce_groups();
  // Asks `request` until answered, for at most kAskAgainMs: true when
  // surely stored (accepted, or a duplicate of an earlier try).
  std::optional<bool> ask_group(const std::function<std::expected<GroupResult, ClientError>()>& request);
  // Waits for the echo jobs accepted (Client::wait, 30 s each, 2 s at a
  // time so that stop() is not held up), one at a time, oldest first;
  // waits.tsv says how each was answered.
  void wait_for_echoes();
  // Asks `batch` until each job is answered, asking again for at most
  // `ask_again_ms` after the first try; records each.
  static constexpr int64_t kAskAgainMs = 20'000;
  void send(Client& client, std::vector<JobSpec> batch, int64_t ask_again_ms = kAskAgainMs);
  void record(const JobSpec& job, bool surely);

  std::filesystem::path dir_;
  WorkloadOptions options_;
  std::atomic<bool> producing_{true};
  std::atomic<size_t> accepted_count_{0}, rejected_{0};
  std::mutex mutex_;
  std::ofstream accepted_file_;
  std::vector<Cancellable> cancellable_;
  std::deque<std::pair<std::string, std::string>> echoes_;
  std::vector<std::string> unclosed_;  // batches whose close went unanswered  // accepted echo jobs to wait for: id, queue
  std::vector<std::thread> threads_;
};

}  // namespace dueq::nemesis
