#include "dueq/worker.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/clock.hpp"
#include "common/curve.hpp"
#include "common/ids.hpp"
#include "common/protocol.hpp"
#include "worker/prefetch.hpp"
#include "worker/wake_policy.hpp"

namespace dueq {

namespace {

constexpr int64_t kHelloRetryMs = 1'000;
constexpr int64_t kDefaultHeartbeatMs = 500;
constexpr int64_t kConfirmWaitMs = 2'000;  // on drain: how long to wait for the broker to confirm results
constexpr int64_t kCancelGraceMs = 5'000;  // on drain: how long cancelled handlers get to return
constexpr int64_t kMinCapacityNoticeMs = 50;  // adaptive capacity: at most one early heartbeat this often
// A result waits up to this long (or until this many wait) to go out in one
// RESULTS frame with the results after it: each frame costs the worker, the
// broker and the CONFIRM back a few wake-ups, which with short jobs cost
// more than the jobs. Sending at once when the pool fell idle would send
// most results alone (short jobs leave it idle between TASKS frames).
constexpr int64_t kResultsLingerUs = 1'000;
constexpr size_t kResultsPerFrame = 1'000;

std::string held_key(const std::string& queue, const std::string& id) { return queue + '\n' + id; }

std::string default_worker_id() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + "-" + std::to_string(::getpid()) + "-" + new_instance_id().substr(0, 6);
}

}  // namespace

struct Worker::Impl {
  // Per delivery: `stop` is what the handler sees (Job::cancelled);
  // `by_user` says the broker cancelled the job (vs. the worker stopping).
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

  // A delivery sent with a start check, taken by a handler thread that waits
  // until it may be announced (an `announce_alone` one waits for the other
  // announced ones to finish, and they for it) and then for the broker's
  // answer to its STARTING (under pool_mutex).
  enum class GateState { waiting, go, drop };
  struct StartGate {
    proto::JobRef ref;
    bool alone = false;
    GateState state = GateState::waiting;
    bool ready = false;      // may be announced: counted in announced_running
    bool announced = false;  // in a STARTING frame sent to the current broker
  };

  explicit Impl(WorkerOptions o) : options(std::move(o)), context(1), dealer(context, zmq::socket_type::dealer) {
    if (options.worker_id.empty()) options.worker_id = default_worker_id();
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  ~Impl() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  // No prefetch set: the buffer follows the measured handler time
  // (worker/prefetch.hpp).
  bool adaptive() const { return options.prefetch == 0; }

  // Running plus buffered jobs.
  uint32_t capacity() const {
    return options.concurrency +
           (adaptive() ? worker::adaptive_prefetch(options.concurrency, mean_handler_us.load(std::memory_order_relaxed)) : options.prefetch);
  }

  // ---- handler pool -------------------------------------------------------
  void start_pool() {
    for (unsigned i = 0; i < options.concurrency; ++i) threads.emplace_back([this] { pool_thread(); });
  }

  // A handler thread hands in its result and takes the next delivery under
  // one lock: with short handlers the pool mutex is the hot spot.
  void pool_thread() {
    std::optional<proto::JobResult> finished;
    while (true) {
      Delivery delivery;
      {
        std::unique_lock lock(pool_mutex);
        if (finished) {
          // One wake-up per batch: a non-empty list already has one pending.
          if (completed.empty()) wake();
          completed.push_back(std::move(*finished));
          finished.reset();
          --running;
        }
        ++idle_threads;
        pool_cv.wait(lock, [&] { return pool_closed || !pending.empty(); });
        --idle_threads;
        if (pending.empty()) return;
        delivery = std::move(pending.front());
        pending.pop_front();
        ++running;
        if (delivery.start_check != proto::StartCheck::none && !await_start(lock, delivery)) {
          --running;
          continue;
        }
      }
      const auto started = std::chrono::steady_clock::now();
      finished = run_delivery(delivery);
      record_handler_time(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started).count());
      if (delivery.start_check != proto::StartCheck::none) {
        // Counted as running until the broker confirms the result: a crash
        // before then would be laid at this job's door too.
        std::lock_guard lock(pool_mutex);
        announced_unconfirmed[delivery.token] = delivery.start_check == proto::StartCheck::announce_alone;
      }
    }
  }

  // An earlier delivery of this job ended with its worker lost before the
  // broker saw it start: the broker records this start before the handler
  // runs, so if the job kills this process it is charged, and the jobs
  // buffered beside it are not. False: the broker said to drop it, or the
  // worker is stopping (it was handed back).
  bool await_start(std::unique_lock<std::mutex>& lock, const Delivery& delivery) {
    const uint64_t token = delivery.token;
    const bool alone = delivery.start_check == proto::StartCheck::announce_alone;
    StartGate& gate = start_gates[token] = StartGate{{delivery.job.queue, delivery.job.id, token}, alone};
    if (alone) ++alone_waiting;
    start_cv.wait(lock, [&] {
      if (gate.state != GateState::waiting) return true;
      // An alone one goes first among those that wait, then runs by itself.
      const bool may = alone ? announced_running == 0 : alone_running == 0 && alone_waiting == 0;
      if (!gate.ready && may) {
        gate.ready = true;
        ++announced_running;
        if (alone) {
          --alone_waiting;
          ++alone_running;
        }
        if (!has_unannounced_starts) wake();
        has_unannounced_starts = true;
      }
      return false;
    });
    if (alone && !gate.ready) {
      --alone_waiting;
      start_cv.notify_all();
    }
    const bool go = gate.state == GateState::go;
    if (!go && gate.ready) end_announced(alone);
    start_gates.erase(token);
    return go;
  }

  // An announced delivery ended (ran, or was dropped); under pool_mutex.
  void end_announced(bool alone) {
    --announced_running;
    if (alone) --alone_running;
    start_cv.notify_all();
  }

  // Main thread: sends STARTING for the gates not yet announced (all of
  // them after a new WELCOME).
  void announce_starts() {
    proto::Starting starting;
    {
      std::lock_guard lock(pool_mutex);
      if (!has_unannounced_starts) return;
      has_unannounced_starts = false;
      for (auto& [token, gate] : start_gates) {
        if (gate.state != GateState::waiting || !gate.ready || gate.announced) continue;
        gate.announced = true;
        starting.items.push_back(gate.ref);
      }
    }
    if (!starting.items.empty()) send(starting);
  }

  void on_start_reply(const proto::StartReply& reply) {
    {
      std::lock_guard lock(pool_mutex);
      for (const auto& ref : reply.go)
        if (auto it = start_gates.find(ref.token); it != start_gates.end() && it->second.state == GateState::waiting)
          it->second.state = GateState::go;
      for (const auto& ref : reply.drop) {
        // Re-delivered elsewhere, finished or cancelled: not this worker's.
        auto it = start_gates.find(ref.token);
        if (it == start_gates.end() || it->second.state != GateState::waiting) continue;
        it->second.state = GateState::drop;
        const std::string key = held_key(ref.queue, ref.id);
        if (auto h = held.find(key); h != held.end() && h->second.token == ref.token) {
          held.erase(h);
          cancel_states.erase(key);
        }
      }
    }
    start_cv.notify_all();
  }

  // Every waiting gate is dropped (the worker is stopping); returns their
  // deliveries, which never started.
  std::vector<proto::JobRef> drop_waiting_starts() {
    std::vector<proto::JobRef> dropped;
    for (auto& [token, gate] : start_gates) {
      if (gate.state != GateState::waiting) continue;
      gate.state = GateState::drop;
      dropped.push_back(gate.ref);
    }
    return dropped;
  }

  // A moving average over about the last 16 runs; racing threads may lose
  // an update, which an average can spare.
  void record_handler_time(double micros) {
    const double mean = mean_handler_us.load(std::memory_order_relaxed);
    mean_handler_us.store(mean <= 0 ? micros : mean + (micros - mean) / 16, std::memory_order_relaxed);
  }

  proto::JobResult run_delivery(Delivery& delivery) {
    proto::JobResult result{delivery.job.queue, delivery.job.id, delivery.token, 0, {}};
    HandlerResult outcome = run_handler(delivery.job);
    result.outcome = static_cast<uint8_t>(outcome.status == HandlerResult::Status::done     ? proto::Outcome::done
                                          : delivery.cancel->by_user.load()                 ? proto::Outcome::cancelled
                                          : outcome.status == HandlerResult::Status::failed ? proto::Outcome::failed
                                                                                            : proto::Outcome::failed_final);
    result.error = std::move(outcome.error);
    if (result.error.size() > proto::kMaxErrorText) result.error.resize(proto::kMaxErrorText);
    return result;
  }

  HandlerResult run_handler(const Job& job) {
    auto it = handlers.find(job.type);
    if (it == handlers.end()) it = handlers.find("*");
    if (it == handlers.end()) return HandlerResult::failed("no handler for job type '" + job.type + "' on worker " + options.worker_id);
    try {
      return it->second(job);
    } catch (const std::exception& e) {
      return HandlerResult::failed(std::string("handler threw: ") + e.what());
    } catch (...) {
      return HandlerResult::failed("handler threw a non-standard exception");
    }
  }

  void stop_pool() {
    {
      std::lock_guard lock(pool_mutex);
      pool_closed = true;
      drop_waiting_starts();
    }
    pool_cv.notify_all();
    start_cv.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
  }

  // ---- broker connection --------------------------------------------------
  template <typename T>
  void send(const T& frame) {
    const std::string bytes = proto::encode(frame);
    (void)dealer.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  }

  void send_heartbeat(int64_t now) {
    announced_capacity = capacity();
    send(proto::Heartbeat{held_refs(), announced_capacity, draining});
    last_heartbeat_ms = now;
  }

  // Adaptive workers: buffered jobs past what the measured handler time lets
  // the handlers start soon (the buffer capacity() allows now) go back to
  // the broker, newest first, so that another worker runs them now instead
  // of this one much later (jobs that got longer). Only past twice that
  // buffer: a few jobs' difference is not worth a round trip.
  void hand_back_excess() {
    if (!adaptive() || draining) return;
    const size_t keep = capacity() - options.concurrency;
    proto::HandBack back;
    {
      std::lock_guard lock(pool_mutex);
      if (pending.size() <= 2 * keep) return;
      while (pending.size() > keep) {
        const Delivery& d = pending.back();
        back.unstarted.push_back({d.job.queue, d.job.id, d.token});
        held.erase(held_key(d.job.queue, d.job.id));
        cancel_states.erase(held_key(d.job.queue, d.job.id));
        pending.pop_back();
      }
    }
    spdlog::info("handing back {} buffered jobs: handlers now take {:.0f} us on average", back.unstarted.size(),
                 mean_handler_us.load(std::memory_order_relaxed));
    for (size_t i = 0; i < back.unstarted.size(); i += proto::kMaxBatch) {
      proto::HandBack chunk;
      chunk.unstarted.assign(back.unstarted.begin() + i,
                             back.unstarted.begin() + std::min(back.unstarted.size(), i + proto::kMaxBatch));
      send(chunk);
    }
  }

  bool capacity_moved_far() const {
    const uint32_t now_capacity = capacity();
    return now_capacity >= 2 * announced_capacity || 2 * now_capacity <= announced_capacity;
  }

  void send_hello(int64_t now) {
    announced_capacity = capacity();
    proto::Hello hello{options.worker_id, options.queues, announced_capacity, held_refs(), host_name(), static_cast<uint32_t>(::getpid())};
    send(hello);
    hello_sent_ms = now;
  }

  std::vector<proto::JobRef> held_refs() const {
    std::vector<proto::JobRef> refs;
    refs.reserve(held.size());
    for (const auto& [key, ref] : held) refs.push_back(ref);
    return refs;
  }

  static std::string host_name() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return host;
  }

  void on_welcome(const proto::Welcome& welcome) {
    const bool restarted = !broker_id.empty() && broker_id != welcome.broker_id;
    welcomed = true;
    broker_id = welcome.broker_id;
    heartbeat_ms = welcome.heartbeat_ms;
    {
      // Maybe lost with the broker that got them: asked again.
      std::lock_guard lock(pool_mutex);
      for (auto& [token, gate] : start_gates) gate.announced = false;
      has_unannounced_starts = !start_gates.empty();
    }
    if (!unconfirmed.empty()) {
      // The broker may have lost these (restart): it applies them by token,
      // so resending an already-applied result is harmless.
      proto::Results again;
      for (const auto& [key, result] : unconfirmed) again.items.push_back(result);
      spdlog::info("resending {} unconfirmed results{}", again.items.size(), restarted ? " to the restarted broker" : "");
      send_results(std::move(again));
    }
  }

  // In frames of at most kMaxBatch results and about kMaxResultsFrameBytes.
  void send_results(proto::Results&& results) {
    proto::Results chunk;
    size_t bytes = 0;
    for (auto& item : results.items) {
      bytes += item.queue.size() + item.id.size() + item.error.size() + 32;
      chunk.items.push_back(std::move(item));
      if (chunk.items.size() == proto::kMaxBatch || bytes >= proto::kMaxResultsFrameBytes) {
        send(chunk);
        chunk.items.clear();
        bytes = 0;
      }
    }
    if (!chunk.items.empty()) send(chunk);
  }

  void on_broker_frame(proto::Frame&& frame, int64_t now) {
    if (auto* w = std::get_if<proto::Welcome>(&frame)) return on_welcome(*w);
    if (auto* t = std::get_if<proto::Tasks>(&frame)) {
      if (draining) {
        // Sent before the broker saw our BYE: hand them back too.
        proto::Bye bye;
        for (const auto& task : t->items) bye.unstarted.push_back({task.queue, task.id, task.token});
        send(bye);
        return;
      }
      // Said at once: until a worker confirms a frame, the broker sends it
      // at most 16 jobs.
      send(proto::Received{t->seq});
      for (auto& task : t->items) on_task(std::move(task));
      return;
    }
    if (std::holds_alternative<proto::Pong>(frame)) return;
    if (auto* c = std::get_if<proto::Confirm>(&frame)) {
      std::lock_guard lock(pool_mutex);
      for (const auto& ref : c->items) {
        auto it = unconfirmed.find(held_key(ref.queue, ref.id));
        if (it != unconfirmed.end() && it->second.token == ref.token) unconfirmed.erase(it);
        if (auto a = announced_unconfirmed.find(ref.token); a != announced_unconfirmed.end()) {
          end_announced(a->second);
          announced_unconfirmed.erase(a);
        }
      }
      return;
    }
    if (auto* c = std::get_if<proto::Cancel>(&frame)) return on_cancel(c->job);
    if (auto* r = std::get_if<proto::StartReply>(&frame)) return on_start_reply(*r);
    if (auto* e = std::get_if<proto::ErrorFrame>(&frame)) {
      if (e->code == "unknown_worker") {
        welcomed = false;
        send_hello(now);
      } else {
        spdlog::warn("broker error: {} {}", e->code, e->message);
      }
      return;
    }
    spdlog::warn("ignoring unexpected frame from the broker");
  }

  // A user cancelled a job this worker holds: drop it if not started, else
  // signal the handler (the exec handler kills its command).
  void on_cancel(const proto::JobRef& ref) {
    const std::string key = held_key(ref.queue, ref.id);
    auto held_it = held.find(key);
    if (held_it == held.end() || held_it->second.token != ref.token) return;
    {
      std::lock_guard lock(pool_mutex);
      const proto::JobResult cancelled{ref.queue, ref.id, ref.token, static_cast<uint8_t>(proto::Outcome::cancelled),
                                       "cancelled before it started"};
      for (auto it = pending.begin(); it != pending.end(); ++it) {
        if (it->job.queue == ref.queue && it->job.id == ref.id) {
          pending.erase(it);
          completed.push_back(cancelled);
          wake();
          return;
        }
      }
      if (auto it = start_gates.find(ref.token); it != start_gates.end() && it->second.state == GateState::waiting) {
        it->second.state = GateState::drop;
        completed.push_back(cancelled);
        wake();
        start_cv.notify_all();
        return;
      }
    }
    if (auto it = cancel_states.find(key); it != cancel_states.end()) {
      it->second->by_user = true;
      it->second->stop = true;
    }
  }

  void on_task(proto::Task&& task) {
    const std::string key = held_key(task.queue, task.id);
    if (held.contains(key)) {
      // A newer delivery of a job this worker still holds: the broker
      // re-leased it, so the old delivery's result would be stale anyway.
      spdlog::warn("job {} delivered again (token {}) while held", task.id, task.token);
    }
    held[key] = proto::JobRef{task.queue, task.id, task.token};
    if (proto::payload_checksum(task.payload.data) != task.payload_checksum) {
      // Changed since its enqueue: running it could do anything, and a retry
      // would read the same bytes. Answered like a handler's final failure.
      std::lock_guard lock(pool_mutex);
      completed.push_back({task.queue, task.id, task.token, static_cast<uint8_t>(proto::Outcome::failed_final),
                           "payload corrupted: its checksum is not the one written at enqueue"});
      return;
    }
    auto cancel = std::make_shared<CancelState>();
    cancel_states[key] = cancel;
    Delivery d{Job{std::move(task.queue), std::move(task.id), std::move(task.type), std::move(task.payload.data),
                   task.due_ms, task.attempt, task.max_attempts, task.created_ms, wall_ms(), &cancel->stop, task.token},
               task.token, cancel, 0, static_cast<proto::StartCheck>(task.start_check)};
    incoming.push_back(std::move(d));
  }

  // Hands the tasks received this turn to the handler threads in one go.
  void start_incoming() {
    if (incoming.empty()) return;
    size_t to_wake;
    const int64_t now_us = steady_us();
    {
      std::lock_guard lock(pool_mutex);
      for (auto& d : incoming) {
        d.queued_us = now_us;
        pending.push_back(std::move(d));
      }
      // Busy threads take the next delivery themselves; idle ones are woken
      // for the work there is (worker/wake_policy.hpp): notify_all made
      // every thread fight for the mutex, and one wake per no-op job cost
      // more than the jobs.
      to_wake = worker::threads_to_wake(incoming.size(), idle_threads, mean_handler_us.load(std::memory_order_relaxed));
    }
    incoming.clear();
    for (size_t i = 0; i < to_wake; ++i) pool_cv.notify_one();
  }

  // Microseconds until a delivery waiting in the pool should have a thread
  // woken for it (-1: none waits while a thread is idle). A thread woken for
  // several short jobs can meet one long one: the others must not wait for
  // it while threads sleep.
  int64_t us_until_unstuck(int64_t now_us) {
    size_t to_wake = 0;
    int64_t wait = -1;
    {
      std::lock_guard lock(pool_mutex);
      if (pending.empty() || idle_threads == 0) return -1;
      const int64_t waited = now_us - pending.front().queued_us;
      if (waited < worker::kMaxWaitForThreadMicros) {
        wait = worker::kMaxWaitForThreadMicros - waited;
      } else {
        to_wake = std::min(pending.size(), idle_threads);
        for (auto& d : pending) d.queued_us = now_us;  // woken for; judged again from now
        wait = worker::kMaxWaitForThreadMicros;
      }
    }
    for (size_t i = 0; i < to_wake; ++i) pool_cv.notify_one();
    return wait;
  }

  // Sends the results handed in, when the linger rule (kResultsLingerUs)
  // says so or `now_us` is -1 (stopping).
  void collect_results(int64_t now_us) {
    std::vector<proto::JobResult> done;
    {
      std::lock_guard lock(pool_mutex);
      if (completed.empty()) {
        results_due_us = -1;
        return;
      }
      if (results_due_us < 0) results_due_us = now_us + kResultsLingerUs;
      if (now_us >= 0 && now_us < results_due_us && completed.size() < kResultsPerFrame) return;
      done.swap(completed);
      results_due_us = -1;
    }
    proto::Results results;
    for (auto& r : done) {
      const std::string key = held_key(r.queue, r.id);
      if (auto it = held.find(key); it != held.end() && it->second.token == r.token) {
        held.erase(it);
        cancel_states.erase(key);
      }
      unconfirmed[key] = r;
      results.items.push_back(std::move(r));
    }
    send_results(std::move(results));
  }

  // Take no new tasks; give back the ones not started.
  void begin_drain(int64_t now) {
    draining = true;
    drain_deadline_ms = now + options.drain_timeout_ms;
    proto::Bye bye;
    {
      std::lock_guard lock(pool_mutex);
      for (const auto& d : pending) bye.unstarted.push_back({d.job.queue, d.job.id, d.token});
      pending.clear();
      const auto waiting = drop_waiting_starts();
      bye.unstarted.insert(bye.unstarted.end(), waiting.begin(), waiting.end());
      for (const auto& ref : bye.unstarted) {
        held.erase(held_key(ref.queue, ref.id));
        cancel_states.erase(held_key(ref.queue, ref.id));
      }
    }
    start_cv.notify_all();
    spdlog::info("draining: {} jobs handed back, {} running", bye.unstarted.size(), running.load());
    send(bye);
  }

  int run() {
    if (options.queues.empty() || options.concurrency == 0 || capacity() > proto::kMaxWorkerCapacity) {
      spdlog::error("a worker needs at least one queue, a concurrency of at least 1 and concurrency + prefetch of at most {}",
                    proto::kMaxWorkerCapacity);
      return 2;
    }
    dealer.set(zmq::sockopt::routing_id, options.worker_id);
    dealer.set(zmq::sockopt::linger, 2000);
    dealer.set(zmq::sockopt::reconnect_ivl, 100);
    dealer.set(zmq::sockopt::reconnect_ivl_max, 1000);
    auto curve = load_client_curve(options.broker_key, options.key_file);
    if (!curve) {
      spdlog::error("{}", curve.error().message);
      return 2;
    }
    apply_client_curve(dealer, *curve);
    try {
      dealer.connect(options.broker);
    } catch (const zmq::error_t& e) {
      spdlog::error("cannot connect to broker endpoint '{}': {}", options.broker, e.what());
      return 2;
    }
    start_pool();
    // Heartbeats, hello retries and the drain run on the steady clock: a
    // wall clock step must not stop the heartbeats and get this worker
    // declared dead.
    int64_t now = steady_ms();
    send_hello(now);
    int64_t next_heartbeat = now + heartbeat_ms;
    while (true) {
      zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd, ZMQ_POLLIN, 0}};
      now = steady_ms();
      int64_t wait = std::max<int64_t>(0, std::min(next_heartbeat, draining ? now + 50 : next_heartbeat) - now);
      const int64_t now_us = steady_us();
      if (const int64_t unstuck_us = us_until_unstuck(now_us); unstuck_us >= 0)
        wait = std::min(wait, (unstuck_us + 999) / 1000);
      if (results_due_us >= 0) wait = std::min(wait, (std::max<int64_t>(0, results_due_us - now_us) + 999) / 1000);
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(wait));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
      now = steady_ms();
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t count = 0;
        [[maybe_unused]] auto n = ::read(wake_fd, &count, sizeof count);
      }
      zmq::message_t message;
      while (dealer.recv(message, zmq::recv_flags::dontwait)) {
        auto frame = proto::decode(std::string_view(static_cast<const char*>(message.data()), message.size()));
        if (!frame) {
          spdlog::warn("undecodable frame from the broker: {}", frame.error().message);
          continue;
        }
        on_broker_frame(std::move(*frame), now);
      }
      start_incoming();
      announce_starts();
      collect_results(steady_us());
      if (stop_requested.load() && !draining) begin_drain(now);
      if (now >= next_heartbeat) {
        if (!welcomed) {
          if (now - hello_sent_ms >= kHelloRetryMs) send_hello(now);
        } else {
          hand_back_excess();
          send_heartbeat(now);
        }
        next_heartbeat = now + heartbeat_ms;
      } else if (adaptive() && welcomed && !draining && capacity_moved_far() && now - last_heartbeat_ms >= kMinCapacityNoticeMs) {
        // The broker learns a capacity from heartbeats: a much larger or
        // smaller one is told at once, not up to a heartbeat later.
        hand_back_excess();
        send_heartbeat(now);
      }
      if (draining) {
        const bool idle = running.load() == 0 && held.empty();
        if (idle) {
          if (idle_since_ms == 0) idle_since_ms = now;
          // Exit once the broker confirmed every result, or after a short
          // wait if it does not (down): its leases then expire instead.
          if (unconfirmed.empty() || now - idle_since_ms >= kConfirmWaitMs) break;
        } else if (now >= drain_deadline_ms && !force_cancelled) {
          spdlog::warn("drain timeout: stopping {} running jobs (they are retried)", running.load());
          force_cancelled = true;
          for (auto& [key, state] : cancel_states) state->stop = true;
        } else if (now >= drain_deadline_ms + kCancelGraceMs) {
          spdlog::error("{} handlers ignored cancellation; exiting without their results", running.load());
          exit_code = 1;
          break;
        }
      }
    }
    for (auto& [key, state] : cancel_states) state->stop = true;
    stop_pool();
    collect_results(-1);
    // Every result was confirmed, or the wait for the broker is over: nothing
    // left is worth holding the exit for.
    dealer.set(zmq::sockopt::linger, 0);
    dealer.close();
    spdlog::info("worker {} stopped", options.worker_id);
    return exit_code;
  }

  WorkerOptions options;
  std::atomic<double> mean_handler_us{0};       // 0 until a handler has run
  uint32_t announced_capacity = 0;              // in the last HELLO or heartbeat
  int64_t last_heartbeat_ms = 0;
  std::unordered_map<std::string, Handler> handlers;
  std::atomic<bool> stop_requested{false};
  bool force_cancelled = false;
  int wake_fd = -1;

  std::mutex pool_mutex;
  std::condition_variable pool_cv;
  std::condition_variable start_cv;  // a StartGate left the waiting state
  std::unordered_map<uint64_t, StartGate> start_gates;  // by token
  bool has_unannounced_starts = false;
  int announced_running = 0;  // gates ready or waiting for the go, and announced deliveries running
  int alone_running = 0;      // of those, announce_alone ones (at most 1)
  int alone_waiting = 0;      // announce_alone gates not ready yet
  // Announced deliveries that ran, by token, until their result is
  // confirmed (true: announce_alone).
  std::unordered_map<uint64_t, bool> announced_unconfirmed;
  std::deque<Delivery> pending;
  std::vector<Delivery> incoming;  // received this loop turn, main thread only
  std::vector<proto::JobResult> completed;
  int64_t results_due_us = -1;  // main thread: when the results in `completed` go out at the latest
  bool pool_closed = false;
  size_t idle_threads = 0;  // waiting on pool_cv (exact whenever pool_mutex is free)
  std::atomic<int> running{0};
  std::vector<std::thread> threads;

  zmq::context_t context;
  zmq::socket_t dealer;
  std::unordered_map<std::string, proto::JobRef> held;             // received, no result yet
  std::unordered_map<std::string, proto::JobResult> unconfirmed;   // result sent, not confirmed
  std::unordered_map<std::string, std::shared_ptr<CancelState>> cancel_states;  // by held key
  bool welcomed = false;
  bool draining = false;
  std::string broker_id;
  int64_t heartbeat_ms = kDefaultHeartbeatMs;
  int64_t hello_sent_ms = 0;
  int64_t drain_deadline_ms = 0;
  int64_t idle_since_ms = 0;
  int exit_code = 0;
};

Worker::Worker(WorkerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Worker::~Worker() = default;

void Worker::handle(const std::string& type, Handler handler) { impl_->handlers[type] = std::move(handler); }

int Worker::run() { return impl_->run(); }

void Worker::stop() {
  impl_->stop_requested = true;
  impl_->wake();
}

}  // namespace dueq
