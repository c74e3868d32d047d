#pragma once
// HandlerPool: a worker's handler threads and the jobs they share. The
// worker's main thread (worker/worker.cpp: the protocol with the broker)
// hands it deliveries and takes back results; the threads run handlers,
// hold back a delivery with a start check until the broker answers its
// STARTING, and learn the mean handler time that sizes the buffer
// (worker/prefetch.hpp) and how many threads a batch wakes
// (worker/wake_policy.hpp). Every method is for the main thread.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/protocol.hpp"
#include "dueq/worker.hpp"
#include "worker/progress_board.hpp"

namespace dueq::worker {

// Per delivery: `stop` is what the handler sees (Job::cancelled); `by_user`
// says the broker cancelled the job (vs. the worker stopping).
struct CancelState {
  std::atomic<bool> stop{false};
  std::atomic<bool> by_user{false};
};

struct Delivery {
  Job job;
  uint64_t token = 0;
  std::shared_ptr<CancelState> cancel;
  int64_t queued_us = 0;  // steady clock: handed to the pool
  proto::StartCheck start_check = proto::StartCheck::none;
};

class HandlerPool {
 public:
  // `handlers` by job type ("*" for any); `wake_main` wakes the main thread
  // (results, or starts to announce).
  HandlerPool(std::string worker_id, const std::unordered_map<std::string, Handler>& handlers,
              std::function<void()> wake_main, bool log_jobs = true);
  ~HandlerPool() { stop(); }

  void start(unsigned threads);
  // Drops the deliveries waiting for a start and joins the threads (they
  // finish the handlers running; stop them first through CancelState).
  void stop();

  // The deliveries received this turn, in one go.
  void submit(std::vector<Delivery>&& deliveries, int64_t now_us);
  // Microseconds until a delivery waiting while threads sleep gets one woken
  // for it (-1: none waits while a thread is idle).
  int64_t us_until_unstuck(int64_t now_us);

  // A result the main thread decided itself (a corrupted payload).
  void add_result(proto::JobResult result);
  // The results to send now: once they have waited kResultsLingerUs, or
  // kResultsPerFrame are waiting, or at once when `now_us` is -1 (stopping).
  std::vector<proto::JobResult> take_results(int64_t now_us);
  // When take_results will have results to send at the latest (-1: none wait).
  int64_t results_due_us() const { return results_due_us_; }

  // A user cancelled the delivery: true when it had not started (it is
  // answered cancelled); false when it runs or is unknown here.
  bool cancel_unstarted(const proto::JobRef& ref);
  // Buffered deliveries past `keep` go back (newest first), when more than
  // `past` wait; their refs.
  std::vector<proto::JobRef> take_buffered_past(size_t keep, size_t past);
  // Every delivery not started (buffered, or waiting for a start); their refs.
  std::vector<proto::JobRef> take_unstarted();

  // The refs to put in a STARTING frame now: deliveries that may start and
  // were not yet announced to the current broker.
  std::vector<proto::JobRef> starts_to_announce();
  // A new broker session: every waiting start is announced again.
  void announce_all_again();
  // The broker's answer to STARTING; the refs it dropped (they are no
  // longer this worker's).
  std::vector<proto::JobRef> on_start_reply(const proto::StartReply& reply);
  // The broker confirmed the result of `token`.
  void confirmed(uint64_t token);

  int running() const { return running_.load(); }
  // The running deliveries' progress reports (Job::progress).
  ProgressBoard& progress() { return progress_; }
  // 0 until a handler has run.
  double mean_handler_us() const { return mean_handler_us_.load(std::memory_order_relaxed); }

  // A result waits up to this long (or until this many wait) to go out in
  // one RESULTS frame with the results after it: each frame costs the
  // worker, the broker and the CONFIRM back a few wake-ups, which with short
  // jobs cost more than the jobs. Sending at once when the pool fell idle
  // would send most results alone (short jobs leave it idle between TASKS
  // frames).
  static constexpr int64_t kResultsLingerUs = 1'000;
  static constexpr size_t kResultsPerFrame = 1'000;

 private:
  // A delivery sent with a start check, taken by a handler thread that waits
  // until it may be announced (an `announce_alone` one waits for every other
  // running delivery to finish, and they for it) and then for the broker's
  // answer to its STARTING (under mutex_).
  enum class GateState { waiting, go, drop };
  struct StartGate {
    proto::JobRef ref;
    bool alone = false;
    GateState state = GateState::waiting;
    bool ready = false;      // may be announced: counted in announced_running_
    bool announced = false;  // in a STARTING frame sent to the current broker
  };

  void thread_main();
  bool await_start(std::unique_lock<std::mutex>& lock, const Delivery& delivery);
  void end_announced(bool alone);
  std::vector<proto::JobRef> drop_waiting_starts();
  void record_handler_time(double micros);
  proto::JobResult run_delivery(Delivery& delivery);
  HandlerResult run_handler(const Job& job);

  const std::string worker_id_;
  const std::unordered_map<std::string, Handler>& handlers_;
  std::function<void()> wake_main_;
  bool log_jobs_ = true;  // WorkerOptions::log_jobs
  ProgressBoard progress_;
  std::atomic<double> mean_handler_us_{0};

  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable start_cv_;  // a StartGate left the waiting state
  std::unordered_map<uint64_t, StartGate> start_gates_;  // by token
  bool has_unannounced_starts_ = false;
  int announced_running_ = 0;  // gates ready or waiting for the go, and announced deliveries running
  int alone_running_ = 0;      // of those, announce_alone ones (at most 1)
  int alone_waiting_ = 0;      // announce_alone gates not ready yet
  int unannounced_running_ = 0;  // deliveries without a start check taken by a handler thread
  // Announced deliveries that ran, by token, until their result is
  // confirmed (true: announce_alone).
  std::unordered_map<uint64_t, bool> announced_unconfirmed_;
  std::deque<Delivery> pending_;
  std::vector<proto::JobResult> completed_;
  int64_t results_due_us_ = -1;  // main thread
  bool closed_ = false;
  size_t idle_threads_ = 0;  // waiting on work_cv_ (exact whenever mutex_ is free)
  std::atomic<int> running_{0};
  std::vector<std::thread> threads_;
};

}  // namespace dueq::worker
