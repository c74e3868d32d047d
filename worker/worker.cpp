#include "dueq/worker.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/clock.hpp"
#include "common/ids.hpp"
#include "common/logging.hpp"
#include "common/names.hpp"
#include "common/protocol.hpp"
#include "common/unique_fd.hpp"
#include "worker/broker_link.hpp"
#include "worker/drain.hpp"
#include "worker/handler_pool.hpp"
#include "worker/held_jobs.hpp"
#include "worker/prefetch.hpp"

namespace dueq {

namespace {

constexpr int64_t kMinCapacityNoticeMs = 50;  // adaptive capacity: at most one early heartbeat this often

std::string default_worker_id() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + "-" + std::to_string(::getpid()) + "-" + new_instance_id().substr(0, 6);
}

}  // namespace

struct Worker::Impl {
  explicit Impl(WorkerOptions o)
      : options(std::move(o)),
        pool(options.worker_id.empty() ? (options.worker_id = default_worker_id()) : options.worker_id, handlers,
             [this] { wake(); }, options.log_jobs),
        context(1),
        dealer(context, zmq::socket_type::dealer), link(context, dealer),
        wake_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (wake_fd.get() < 0) throw std::runtime_error("eventfd failed");
  }

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd.get(), &one, sizeof one);
  }

  // No prefetch set: the buffer follows the measured handler time
  // (worker/prefetch.hpp).
  bool adaptive() const { return options.prefetch == 0; }

  // Running plus buffered jobs.
  uint32_t capacity() const {
    return options.concurrency +
           (adaptive() ? worker::adaptive_prefetch(options.concurrency, pool.mean_handler_us()) : options.prefetch);
  }

  // Sends STARTING for the deliveries the pool holds back until the broker
  // has recorded their start.
  void announce_starts() {
    proto::Starting starting;
    starting.items = pool.starts_to_announce();
    if (starting.items.empty()) return;
    // The results of what ran before go first: a start announced alone
    // comes after every other job finished, and the broker (and the
    // conformance suite) read it so.
    collect_results(-1);
    send(starting);
  }

  void on_start_reply(const proto::StartReply& reply) {
    for (const auto& ref : pool.on_start_reply(reply)) held.forget(ref);
  }

  template <typename T>
  void send(const T& frame) {
    const std::string bytes = proto::encode(frame);
    (void)dealer.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  }

  void send_heartbeat(int64_t now) {
    announced_capacity = capacity();
    send(proto::Heartbeat{held.refs(), announced_capacity, drain.active()});
    last_heartbeat_ms = now;
    send_progress();
  }

  // The progress reported since the last heartbeat: the latest of each job.
  void send_progress() {
    proto::Progress progress{pool.progress().take_changed()};
    if (!progress.items.empty()) send(progress);
  }

  // Adaptive workers: buffered jobs past what the measured handler time lets
  // the handlers start soon (the buffer capacity() allows now) go back to
  // the broker, newest first, so that another worker runs them now instead
  // of this one much later (jobs that got longer). Only past twice that
  // buffer: a few jobs' difference is not worth a round trip.
  void hand_back_excess() {
    if (!adaptive() || drain.active()) return;
    const size_t keep = capacity() - options.concurrency;
    proto::HandBack back;
    back.unstarted = pool.take_buffered_past(keep, 2 * keep);
    if (back.unstarted.empty()) return;
    for (const auto& ref : back.unstarted) held.forget(ref);
    spdlog::info("handing back {} buffered jobs: handlers now take {:.0f} us on average", back.unstarted.size(),
                 pool.mean_handler_us());
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
    proto::Hello hello{options.worker_id, queue_names, announced_capacity, held.refs(), host_name(),
                       static_cast<uint32_t>(::getpid()), queue_weights, options.strict_priority};
    send(hello);
    link.hello_sent(now);
  }

  static std::string host_name() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return host;
  }

  void on_welcome(const proto::Welcome& welcome) {
    if (link.on_welcome(welcome))
      spdlog::info("registered with broker {} at {}: queues {}, capacity {}", welcome.broker_id, link.endpoint(),
                   fmt::join(queue_names, ","), announced_capacity);
    pool.announce_all_again();
    pool.progress().mark_all_changed();
    // Until its first heartbeat the broker treats this worker as a newcomer,
    // sent no job of a queue another worker already serves (§3.3).
    send_heartbeat(steady_ms());
    if (!held.all_confirmed()) {
      // The broker may have lost these (restart): it applies them by token,
      // so resending an already-applied result is harmless.
      proto::Results again;
      again.items = held.unconfirmed();
      spdlog::info("resending {} unconfirmed results", again.items.size());
      send_results(std::move(again));
    }
  }

  // In frames of at most kMaxBatch results and about kMaxResultsFrameBytes.
  void send_results(proto::Results&& results) {
    proto::Results chunk;
    size_t bytes = 0;
    for (auto& item : results.items) {
      bytes += item.queue.size() + item.id.size() + item.error.size() + item.result.data.size() + 32;
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
      if (drain.active()) {
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
      for (const auto& ref : c->items) {
        held.confirmed(ref);
        pool.confirmed(ref.token);
      }
      return;
    }
    if (auto* c = std::get_if<proto::Cancel>(&frame)) return on_cancel(c->job);
    if (auto* r = std::get_if<proto::StartReply>(&frame)) return on_start_reply(*r);
    if (auto* e = std::get_if<proto::ErrorFrame>(&frame)) {
      if (e->code == "unknown_worker") {
        link.on_unknown_worker(now);
        send_hello(now);
      } else if (e->code == "refused" && !link.welcomed()) {
        link.on_refused(now, e->message);
      } else if (e->code == "not_leader" && link.several_endpoints()) {
        link.on_not_leader();
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
    if (!held.holds(ref) || pool.cancel_unstarted(ref)) return;
    held.stop_running(ref);
  }

  void on_task(proto::Task&& task) {
    if (held.knows({task.queue, task.id, task.token})) {
      // The same delivery again: it runs once (protocol.md §3.3).
      spdlog::warn("job {} delivered again with the same token {}: not started twice", loggable(task.id), task.token);
      return;
    }
    if (held.holds_job(task.queue, task.id)) {
      // A newer delivery of a job this worker still holds: the broker
      // re-leased it, so the old delivery's result would be stale anyway.
      spdlog::warn("job {} delivered again (token {}) while held", loggable(task.id), task.token);
    }
    const proto::JobRef ref{task.queue, task.id, task.token};
    held.hold(ref);
    if (proto::payload_checksum(task.payload.data) != task.payload_checksum) {
      // Changed since its enqueue: running it could do anything, and a retry
      // would read the same bytes. Answered like a handler's final failure.
      pool.add_result({task.queue, task.id, task.token, proto::Outcome::failed_final,
                       "payload corrupted: its checksum is not the one written at enqueue"});
      return;
    }
    auto cancel = held.cancel_state(ref);
    worker::Delivery d{Job{std::move(task.queue), std::move(task.id), std::move(task.type), std::move(task.payload.data),
                   task.due_ms, task.attempt, task.max_attempts, task.created_ms, wall_ms(), &cancel->stop, task.token, std::move(task.key.data), task.start_by_ms,
                   std::move(task.traceparent), std::move(task.tracestate)},
               task.token, cancel, 0, task.start_check};
    incoming.push_back(std::move(d));
  }

  // Sends the results the pool hands over (HandlerPool::take_results).
  void collect_results(int64_t now_us) {
    std::vector<proto::JobResult> done = pool.take_results(now_us);
    if (done.empty()) return;
    proto::Results results;
    for (auto& r : done) {
      held.finished(r);
      results.items.push_back(std::move(r));
    }
    send_results(std::move(results));
  }

  // Take no new tasks; give back the ones not started.
  void begin_drain(int64_t now) {
    drain.begin(now, options.drain_timeout_ms);
    proto::Bye bye;
    bye.unstarted = pool.take_unstarted();
    for (const auto& ref : bye.unstarted) held.forget(ref);
    spdlog::info("draining: {} jobs handed back, {} running", bye.unstarted.size(), pool.running());
    send(bye);
  }

  // The queues and their weights from the options; false (logged) when they
  // cannot be served.
  bool read_queues() {
    if (options.queues.empty() || options.concurrency == 0 || capacity() > proto::kMaxWorkerCapacity) {
      spdlog::error("a worker needs at least one queue, a concurrency of at least 1 and concurrency + prefetch of at most {}",
                    proto::kMaxWorkerCapacity);
      return false;
    }
    for (const auto& text : options.queues) {
      auto parsed = parse_queue_weight(text);
      if (!parsed || std::find(queue_names.begin(), queue_names.end(), parsed->name) != queue_names.end()) {
        spdlog::error("queue '{}': {}", text, parsed ? "named twice" : parsed.error().message);
        return false;
      }
      queue_names.push_back(parsed->name);
      queue_weights.push_back(parsed->weight);
    }
    return true;
  }

  // How long the loop may wait for the socket: until the next heartbeat, a
  // drain check, a stuck handler's release, a broker switch or results due.
  int64_t wait_ms(int64_t now, int64_t next_heartbeat) {
    int64_t wait = std::max<int64_t>(0, std::min(next_heartbeat, drain.active() ? now + 50 : next_heartbeat) - now);
    const int64_t now_us = steady_us();
    if (const int64_t unstuck_us = pool.us_until_unstuck(now_us); unstuck_us >= 0)
      wait = std::min(wait, (unstuck_us + 999) / 1000);
    if (const int64_t switch_ms = link.ms_until_switch(now); switch_ms >= 0) wait = std::min(wait, switch_ms);
    if (const int64_t due_us = pool.results_due_us(); due_us >= 0)
      wait = std::min(wait, (std::max<int64_t>(0, due_us - now_us) + 999) / 1000);
    return wait;
  }

  void read_frames(int64_t now) {
    zmq::message_t message;
    while (dealer.recv(message, zmq::recv_flags::dontwait)) {
      auto frame = proto::decode(std::string_view(static_cast<const char*>(message.data()), message.size()));
      if (!frame) {
        spdlog::warn("undecodable frame from the broker: {}", frame.error().message);
        continue;
      }
      link.heard(now);
      on_broker_frame(std::move(*frame), now);
    }
  }

  // A heartbeat when one is due (a HELLO again while none was answered), or
  // at once when the capacity moved far. Returns the next heartbeat's time.
  int64_t beat(int64_t now, int64_t next_heartbeat) {
    if (now >= next_heartbeat) {
      if (!link.welcomed()) {
        if (link.hello_unanswered(now)) send_hello(now);
      } else {
        hand_back_excess();
        send_heartbeat(now);
      }
      return now + link.heartbeat_ms();
    }
    if (adaptive() && link.welcomed() && !drain.active() && capacity_moved_far() && now - last_heartbeat_ms >= kMinCapacityNoticeMs) {
      // The broker learns a capacity from heartbeats: a much larger or
      // smaller one is told at once, not up to a heartbeat later.
      hand_back_excess();
      send_heartbeat(now);
    }
    return next_heartbeat;
  }

  // The drain's next step; true when the loop is to end.
  bool drained(int64_t now) {
    const auto step = drain.step(now, pool.running() == 0 && held.empty(), held.all_confirmed());
    if (step == worker::Drain::Step::exit) return true;
    if (step == worker::Drain::Step::stop_handlers) {
      spdlog::warn("drain timeout: stopping {} running jobs (they are retried)", pool.running());
      held.stop_all();
    } else if (step == worker::Drain::Step::exit_abandoned) {
      spdlog::error("{} handlers ignored cancellation; exiting without their results", pool.running());
      exit_code = 1;
      return true;
    }
    return false;
  }

  int run() {
    if (!read_queues()) return 2;
    // Heartbeats, hello retries and the drain run on the steady clock: a
    // wall clock step must not stop the heartbeats and get this worker
    // declared dead.
    int64_t now = steady_ms();
    if (auto opened = link.open(options.worker_id, options.broker, options.broker_key, options.key_file, now); !opened) {
      spdlog::error("{}", opened.error().message);
      return 2;
    }
    pool.start(options.concurrency);
    send_hello(now);
    int64_t next_heartbeat = now + link.heartbeat_ms();
    while (true) {
      zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, wake_fd.get(), ZMQ_POLLIN, 0},
                                 {link.events_handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 3, std::chrono::milliseconds(wait_ms(steady_ms(), next_heartbeat)));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
      now = steady_ms();
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t count = 0;
        [[maybe_unused]] auto n = ::read(wake_fd.get(), &count, sizeof count);
      }
      read_frames(now);
      link.on_turn(now, (items[2].revents & ZMQ_POLLIN) != 0);
      if (link.switch_if_due(now)) send_hello(now);
      pool.submit(std::move(incoming), steady_us());
      announce_starts();
      collect_results(steady_us());
      if (stop_requested.load() && !drain.active()) begin_drain(now);
      next_heartbeat = beat(now, next_heartbeat);
      if (drained(now)) break;
    }
    held.stop_all();
    pool.stop();
    collect_results(-1);
    // Every result was confirmed, or the wait for the broker is over: nothing
    // left is worth holding the exit for.
    dealer.set(zmq::sockopt::linger, 0);
    dealer.close();
    spdlog::info("worker {} stopped", options.worker_id);
    return exit_code;
  }

  WorkerOptions options;
  std::vector<std::string> queue_names;  // options.queues without their weights
  std::vector<uint32_t> queue_weights;
  uint32_t announced_capacity = 0;              // in the last HELLO or heartbeat
  int64_t last_heartbeat_ms = 0;
  std::unordered_map<std::string, Handler> handlers;
  std::atomic<bool> stop_requested{false};

  worker::HandlerPool pool;  // after `options` and `handlers`, which it reads
  std::vector<worker::Delivery> incoming;  // received this loop turn
  zmq::context_t context;
  zmq::socket_t dealer;
  worker::BrokerLink link;  // dealer's endpoint and this worker's registration
  UniqueFd wake_fd;
  worker::HeldJobs held;
  worker::Drain drain;
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
