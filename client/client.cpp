#include "dueq/client.hpp"

#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.hpp>

#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <iterator>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "common/clock.hpp"
#include "common/curve.hpp"
#include "common/ids.hpp"
#include "common/protocol.hpp"
#include "common/unique_fd.hpp"

namespace dueq {

namespace {

using FrameResult = std::expected<proto::Frame, ClientError>;
using Completion = std::function<void(FrameResult)>;

ClientError unexpected_reply(const std::string& what) { return ClientError{"bad_frame", "unexpected reply to " + what, 0}; }

}  // namespace

// One I/O thread owns the DEALER socket; any thread hands it requests through
// a locked queue and an eventfd, so many requests can be outstanding on one
// connection. Each is sent again when unanswered for timeout_ms (requests are
// idempotent: enqueues carry their job ids) and fails after `attempts`.
// Enqueues waiting to be sent together go out as one frame: many threads
// (or futures) enqueueing one job each cost the broker one message per
// batch, not per job, and wait no longer for it.
struct Client::Impl {
  Impl(std::string endpoint, ClientOptions o)
      : options(std::move(o)), context(1), socket(context, zmq::socket_type::dealer), endpoint(std::move(endpoint)),
        wakeup(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (wakeup.get() < 0) throw std::runtime_error("eventfd failed");
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::reconnect_ivl, 100);
    auto curve = load_client_curve(options.broker_key, options.key_file);
    if (!curve) throw std::invalid_argument(curve.error().message);
    apply_client_curve(socket, *curve);
    socket.connect(this->endpoint);
    io = std::thread([this] { run(); });
  }

  // Ends the I/O thread, which answers what is pending. Called by ~Client
  // before its members go: callbacks answered then may still call it.
  void close() {
    stopping = true;
    wake();
    io.join();
  }

  // From any thread: encodes the request here (off the I/O thread) and
  // queues it; `done` runs on the I/O thread with the reply or the error.
  template <typename Request>
  void submit(Request request, Completion done) {
    request.request_id = next_request_id.fetch_add(1) + 1;
    // Checked here as the broker would: a frame it cannot accept would be
    // answered as a whole, never as this request's own mistake.
    if (auto ok = proto::validate(proto::Frame{request}); !ok)
      return refuse(ClientError{"bad_argument", ok.error().message, 0}, std::move(done));
    queue_for_io(Outgoing{request.request_id, proto::encode(request), std::move(done)});
  }

  // An enqueue stays unencoded until the I/O thread takes it: it may share
  // a frame with others taken at the same moment.
  void submit(proto::Enqueue request, Completion done) {
    request.request_id = next_request_id.fetch_add(1) + 1;
    queue_for_io(Outgoing{request.request_id, {}, std::move(done), std::move(request)});
  }

  // submit() with a future: `convert` turns the reply frame into T on the
  // I/O thread.
  template <typename T, typename Request, typename Convert>
  std::future<std::expected<T, ClientError>> ask(Request request, Convert convert) {
    auto promise = std::make_shared<std::promise<std::expected<T, ClientError>>>();
    auto future = promise->get_future();
    submit(std::move(request), [promise, convert = std::move(convert)](FrameResult frame) mutable {
      if (!frame) promise->set_value(std::unexpected(std::move(frame.error())));
      else promise->set_value(convert(std::move(*frame)));
    });
    return future;
  }

  // Answers `error` from the I/O thread, like any reply: a caller holding
  // a lock its callback takes must not find the callback run in its call.
  void refuse(ClientError error, Completion done) {
    queue_for_io(Outgoing{0, {}, std::move(done), std::nullopt, std::move(error)});
  }

  struct Outgoing {
    uint64_t request_id;
    std::string bytes;  // the encoded request; empty for an enqueue not encoded yet
    Completion done;
    std::optional<proto::Enqueue> enqueue;
    std::optional<ClientError> refused;  // answered at once, not sent
  };
  struct Pending {
    std::string bytes;
    Completion done;
    int attempts_left = 0;
    bool sent = false;
  };

  // Wakes the I/O thread only when the queue was empty: it takes the whole
  // queue after every wake-up it reads, before it waits again, so a request
  // joining a non-empty queue is taken with the one that woke it (a write to
  // the eventfd per request was a syscall and often a context switch each).
  // A request from a callback, on the I/O thread itself, is taken before
  // the thread waits again: no wake-up at all.
  void queue_for_io(Outgoing&& outgoing) {
    bool was_empty = false;
    {
      std::unique_lock lock(incoming_mutex);
      if (closed) {
        lock.unlock();
        outgoing.done(std::unexpected(closing_error()));
        return;
      }
      was_empty = incoming.empty();
      incoming.push_back(std::move(outgoing));
    }
    if (was_empty && !on_io_thread()) wake();
  }

  bool on_io_thread() const { return std::this_thread::get_id() == io.get_id(); }

  static ClientError closing_error() {
    return ClientError{"unavailable", "the client was closed before the broker answered", 0};
  }

  void wake() {
    const uint64_t one = 1;
    (void)!::write(wakeup.get(), &one, sizeof one);
  }

  void run() {
    while (!stopping) {
      // Expired first: a callback answered there may queue a request, which
      // is taken right after instead of after the wait.
      expire(steady_ms());
      take_incoming();
      send_unsent();
      zmq::pollitem_t items[] = {{socket.handle(), 0, static_cast<short>(ZMQ_POLLIN | (unsent > 0 ? ZMQ_POLLOUT : 0)), 0},
                                 {nullptr, wakeup.get(), ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, std::chrono::milliseconds(poll_timeout_ms()));
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t count = 0;
        (void)!::read(wakeup.get(), &count, sizeof count);
      }
      if (items[0].revents & ZMQ_POLLIN) receive_all();
    }
    // Closed under the lock: a callback answered below that calls again is
    // answered at once instead of joining a queue no one reads.
    std::deque<Outgoing> unsent_requests;
    {
      std::lock_guard lock(incoming_mutex);
      closed = true;
      unsent_requests.swap(incoming);
    }
    auto answered = std::exchange(pending_by_id, {});
    for (auto& [id, pending] : answered) pending.done(std::unexpected(closing_error()));
    for (auto& request : unsent_requests) request.done(std::unexpected(closing_error()));
  }

  void take_incoming() {
    std::deque<Outgoing> taken;
    {
      std::lock_guard lock(incoming_mutex);
      taken.swap(incoming);
    }
    const int64_t now = steady_ms();
    auto add_pending = [&](uint64_t request_id, std::string bytes, Completion done) {
      pending_by_id.emplace(request_id, Pending{std::move(bytes), std::move(done), options.attempts, false});
      deadlines.push_back({now + options.timeout_ms, request_id});
      ++unsent;
    };
    std::vector<Outgoing> merging;
    size_t merging_jobs = 0, merging_bytes = 0;
    auto send_merged = [&] {
      if (merging.size() == 1) {
        add_pending(merging[0].request_id, proto::encode(*merging[0].enqueue), std::move(merging[0].done));
      } else if (merging.size() > 1) {
        proto::Enqueue merged;
        merged.request_id = next_request_id.fetch_add(1) + 1;
        merged.jobs.reserve(merging_jobs);
        auto parts = std::make_shared<std::vector<MergedPart>>();
        for (auto& o : merging) {
          parts->push_back({o.request_id, o.enqueue->jobs.size(), std::move(o.done)});
          std::move(o.enqueue->jobs.begin(), o.enqueue->jobs.end(), std::back_inserter(merged.jobs));
        }
        add_pending(merged.request_id, proto::encode(merged), answer_parts(std::move(parts), merging_jobs));
      }
      merging.clear();
      merging_jobs = merging_bytes = 0;
    };
    for (auto& o : taken) {
      if (o.refused) {
        o.done(std::unexpected(std::move(*o.refused)));
        continue;
      }
      if (!o.enqueue) {
        add_pending(o.request_id, std::move(o.bytes), std::move(o.done));
        continue;
      }
      size_t bytes = 0;
      for (const auto& job : o.enqueue->jobs) bytes += job.payload.data.size();
      if (merging_jobs + o.enqueue->jobs.size() > proto::kMaxBatch || merging_bytes + bytes > proto::kMaxPayloadBytes)
        send_merged();
      merging_jobs += o.enqueue->jobs.size();
      merging_bytes += bytes;
      merging.push_back(std::move(o));
    }
    send_merged();
  }

  // One enqueue request inside a merged frame: its own id, its jobs' count.
  struct MergedPart {
    uint64_t request_id;
    size_t jobs;
    Completion done;
  };

  // Hands each request of a merged frame its own share of the reply (its
  // jobs' outcomes, in order) or the error that answered the frame.
  static Completion answer_parts(std::shared_ptr<std::vector<MergedPart>> parts, size_t jobs) {
    return [parts = std::move(parts), jobs](FrameResult frame) {
      auto* reply = frame ? std::get_if<proto::EnqueueReply>(&*frame) : nullptr;
      if (frame && (reply == nullptr || reply->results.size() != jobs)) frame = std::unexpected(unexpected_reply("enqueue"));
      size_t at = 0;
      for (auto& part : *parts) {
        if (!frame) {
          part.done(std::unexpected(frame.error()));
          continue;
        }
        proto::EnqueueReply own{part.request_id, {}, reply->retry_after_ms};
        own.results.assign(std::make_move_iterator(reply->results.begin() + at),
                           std::make_move_iterator(reply->results.begin() + at + part.jobs));
        at += part.jobs;
        part.done(proto::Frame{std::move(own)});
      }
    };
  }

  // A DEALER with no usable connection (a broker that refused this key's
  // handshake) refuses sends: those wait here until their deadline.
  void send_unsent() {
    if (unsent == 0) return;
    for (auto& [id, pending] : pending_by_id) {
      if (pending.sent) continue;
      if (!socket.send(zmq::buffer(pending.bytes), zmq::send_flags::dontwait)) return;
      pending.sent = true;
      --unsent;
    }
  }

  void receive_all() {
    zmq::message_t message;
    while (socket.recv(message, zmq::recv_flags::dontwait)) {
      auto frame = proto::decode(std::string_view(static_cast<const char*>(message.data()), message.size()),
                                 proto::kMaxReplyValues);
      heard_from_broker = true;
      if (!frame) continue;  // no request id to answer: its request times out
      const uint64_t id = proto::request_id_of(*frame);
      auto* error = std::get_if<proto::ErrorFrame>(&*frame);
      // An error that names no request (the broker could not read one from
      // the frame) fails none: each request of the many threads sharing
      // this connection is answered by its own reply or times out.
      auto it = pending_by_id.find(id);
      if (it == pending_by_id.end()) continue;  // a late reply to a request already answered or failed
      Completion done = std::move(it->second.done);
      if (!it->second.sent) --unsent;
      pending_by_id.erase(it);
      if (error != nullptr) done(std::unexpected(ClientError{error->code, error->message, error->retry_after_ms}));
      else done(std::move(*frame));
    }
  }

  // Deadlines are queued in the order they were set, all timeout_ms long,
  // so the earliest is at the front; answered requests' entries are skipped.
  void expire(int64_t now) {
    while (!deadlines.empty() && deadlines.front().first <= now) {
      const uint64_t id = deadlines.front().second;
      deadlines.pop_front();
      auto it = pending_by_id.find(id);
      if (it == pending_by_id.end()) continue;
      Pending& pending = it->second;
      if (--pending.attempts_left > 0) {
        deadlines.push_back({now + options.timeout_ms, id});
        if (pending.sent) ++unsent;
        pending.sent = false;
        continue;
      }
      Completion done = std::move(pending.done);
      if (!pending.sent) --unsent;
      pending_by_id.erase(it);
      done(std::unexpected(timeout_error()));
    }
  }

  int64_t poll_timeout_ms() const {
    if (deadlines.empty()) return -1;
    return std::max<int64_t>(0, deadlines.front().first - steady_ms());
  }

  ClientError timeout_error() const {
    return ClientError{"timeout",
                       "no reply from the broker at " + endpoint + " after " + std::to_string(options.attempts) +
                           " attempts" +
                           (options.broker_key.empty() || heard_from_broker
                                ? ""
                                : " (nothing at all came from it yet: a broker with CURVE also answers nothing to a "
                                  "key it does not allow)"),
                       0};
  }

  const ClientOptions options;
  zmq::context_t context;
  zmq::socket_t socket;  // the I/O thread's only
  const std::string endpoint;
  UniqueFd wakeup;
  std::atomic<uint64_t> next_request_id{0};
  std::atomic<bool> stopping{false};

  std::mutex incoming_mutex;
  std::deque<Outgoing> incoming;  // guarded by incoming_mutex
  bool closed = false;            // guarded by incoming_mutex; set when the I/O thread ends

  // The I/O thread's own.
  std::unordered_map<uint64_t, Pending> pending_by_id;
  std::deque<std::pair<int64_t, uint64_t>> deadlines;  // (steady ms, request id)
  size_t unsent = 0;
  bool heard_from_broker = false;  // any frame at all arrived on this connection
  std::thread io;  // last: starts after everything it uses exists
};

namespace {

std::expected<std::vector<EnqueueResult>, ClientError> enqueue_results(proto::Frame frame, size_t jobs) {
  auto* reply = std::get_if<proto::EnqueueReply>(&frame);
  if (reply == nullptr || reply->results.size() != jobs) return std::unexpected(unexpected_reply("enqueue"));
  std::vector<EnqueueResult> out;
  out.reserve(jobs);
  for (auto& r : reply->results)
    out.push_back(EnqueueResult{std::move(r.id), static_cast<EnqueueResult::Status>(r.status), std::move(r.reason),
                                r.status == static_cast<uint8_t>(proto::EnqueueStatus::overloaded) ? reply->retry_after_ms : 0});
  return out;
}

// The most bytes of a job's frame beyond its payload, id, type and queue: the
// job's array and the headers and integers msgpack writes for it.
constexpr size_t kJobFrameOverhead = 64;

std::expected<proto::Enqueue, ClientError> enqueue_request(std::vector<JobSpec>& jobs) {
  if (jobs.empty() || jobs.size() > proto::kMaxBatch)
    return std::unexpected(ClientError{"bad_argument", "a batch holds 1..10000 jobs", 0});
  // The broker drops a connection that sends a frame over its limit, and a
  // resend would drop it again: such a batch is refused here.
  size_t frame_bytes = 64;
  for (const auto& job : jobs)
    frame_bytes += job.payload.size() + job.id.size() + job.type.size() + job.queue.size() + kJobFrameOverhead;
  if (frame_bytes > proto::kMaxFrameBytes)
    return std::unexpected(ClientError{"bad_argument", "a batch of " + std::to_string(jobs.size()) + " jobs takes up to " +
                                                           std::to_string(frame_bytes) + " bytes, over the broker's " +
                                                           std::to_string(proto::kMaxFrameBytes) +
                                                           " byte frame limit: send it in parts",
                                       0});
  proto::Enqueue request;
  request.jobs.reserve(jobs.size());
  for (auto& job : jobs) {
    if (job.id.empty()) job.id = new_job_id();
    request.jobs.push_back(proto::NewJob{std::move(job.queue), std::move(job.id), std::move(job.type),
                                         proto::Bytes{std::move(job.payload)}, job.due_ms, job.max_attempts,
                                         job.backoff_base_ms, job.backoff_cap_ms});
  }
  return request;
}

// A blocking call on the I/O thread would wait for the thread it blocks.
ClientError blocking_from_callback(const std::string& what) {
  return ClientError{"bad_argument", what + ": a blocking call from a completion callback (the client's I/O thread) "
                                            "would wait forever; use the *_async calls there", 0};
}

// The future of a call that answers through a callback.
template <typename T, typename Call>
std::future<std::expected<T, ClientError>> as_future(Call call) {
  auto promise = std::make_shared<std::promise<std::expected<T, ClientError>>>();
  auto future = promise->get_future();
  call([promise](std::expected<T, ClientError> result) { promise->set_value(std::move(result)); });
  return future;
}

}  // namespace

Client::Client(std::string broker_endpoint, ClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(broker_endpoint), std::move(options))) {}
Client::~Client() { impl_->close(); }

int64_t Client::in_ms(int64_t delay_ms) { return wall_ms() + delay_ms; }

void Client::enqueue_batch_async(std::vector<JobSpec> jobs, EnqueueBatchCallback on_done) {
  if (!on_done) throw std::invalid_argument("enqueue_batch_async: an empty on_done callback");
  auto request = enqueue_request(jobs);
  if (!request)
    return impl_->refuse(request.error(), [on_done = std::move(on_done)](FrameResult frame) { on_done(std::unexpected(frame.error())); });
  const size_t count = request->jobs.size();
  impl_->submit(std::move(*request), [count, on_done = std::move(on_done)](FrameResult frame) {
    if (!frame) return on_done(std::unexpected(std::move(frame.error())));
    on_done(enqueue_results(std::move(*frame), count));
  });
}

void Client::enqueue_async(JobSpec job, EnqueueCallback on_done) {
  if (!on_done) throw std::invalid_argument("enqueue_async: an empty on_done callback");
  std::vector<JobSpec> one;
  one.push_back(std::move(job));
  auto request = enqueue_request(one);
  if (!request)
    return impl_->refuse(request.error(), [on_done = std::move(on_done)](FrameResult frame) { on_done(std::unexpected(frame.error())); });
  impl_->submit(std::move(*request), [on_done = std::move(on_done)](FrameResult frame) {
    if (!frame) return on_done(std::unexpected(std::move(frame.error())));
    auto results = enqueue_results(std::move(*frame), 1);
    if (!results) return on_done(std::unexpected(results.error()));
    on_done(std::move(results->front()));
  });
}

std::future<std::expected<std::vector<EnqueueResult>, ClientError>> Client::enqueue_batch_async(std::vector<JobSpec> jobs) {
  return as_future<std::vector<EnqueueResult>>(
      [&](EnqueueBatchCallback on_done) { enqueue_batch_async(std::move(jobs), std::move(on_done)); });
}

std::future<std::expected<EnqueueResult, ClientError>> Client::enqueue_async(JobSpec job) {
  return as_future<EnqueueResult>([&](EnqueueCallback on_done) { enqueue_async(std::move(job), std::move(on_done)); });
}

std::expected<EnqueueResult, ClientError> Client::enqueue(JobSpec job) {
  if (impl_->on_io_thread()) return std::unexpected(blocking_from_callback("enqueue"));
  return enqueue_async(std::move(job)).get();
}

std::expected<std::vector<EnqueueResult>, ClientError> Client::enqueue_batch(std::vector<JobSpec> jobs) {
  if (impl_->on_io_thread()) return std::unexpected(blocking_from_callback("enqueue_batch"));
  return enqueue_batch_async(std::move(jobs)).get();
}

std::expected<BrokerStats, ClientError> Client::broker_stats() {
  if (impl_->on_io_thread()) return std::unexpected(blocking_from_callback("stats"));
  using Result = std::expected<BrokerStats, ClientError>;
  return impl_->ask<BrokerStats>(proto::StatsRequest{}, [](proto::Frame frame) -> Result {
    auto* reply = std::get_if<proto::StatsReply>(&frame);
    if (reply == nullptr) return std::unexpected(unexpected_reply("stats"));
    BrokerStats out{.workers = reply->workers};
    for (const auto& q : reply->queues)
      out.queues.push_back(QueueStats{q.queue, q.scheduled, q.waiting, q.in_flight, q.done, q.dead, q.accepted,
                                      q.retried, q.stale_acks, q.next_due_ms, q.cancelled, q.purged});
    return out;
  }).get();
}

std::expected<std::vector<QueueStats>, ClientError> Client::stats() {
  auto all = broker_stats();
  if (!all) return std::unexpected(std::move(all.error()));
  return std::move(all->queues);
}

std::expected<std::optional<std::map<std::string, std::string>>, ClientError> Client::job(const std::string& id,
                                                                                           const std::string& queue) {
  if (impl_->on_io_thread()) return std::unexpected(blocking_from_callback("job"));
  using Fields = std::optional<std::map<std::string, std::string>>;
  return impl_->ask<Fields>(proto::JobRequest{0, id, queue}, [](proto::Frame frame) -> std::expected<Fields, ClientError> {
    auto* reply = std::get_if<proto::JobReply>(&frame);
    if (reply == nullptr) return std::unexpected(unexpected_reply("job"));
    if (!reply->found) return Fields{};
    return Fields(std::move(reply->fields));
  }).get();
}

std::expected<AdminResult, ClientError> Client::admin(const AdminCommand& command) {
  if (impl_->on_io_thread()) return std::unexpected(blocking_from_callback(command.op));
  return impl_->ask<AdminResult>(
      proto::AdminRequest{0, command.op, command.queue, command.ids, command.older_than_ms, command.limit},
      [op = command.op](proto::Frame frame) -> std::expected<AdminResult, ClientError> {
        auto* reply = std::get_if<proto::AdminReply>(&frame);
        if (reply == nullptr) return std::unexpected(unexpected_reply(op));
        return AdminResult{std::move(reply->rows), std::move(reply->summary)};
      }).get();
}

}  // namespace dueq
