#include "clients/cpp/connection.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <stdexcept>
#include <vector>

#include "clients/cpp/enqueue_merge.hpp"
#include "common/clock.hpp"
#include "common/curve.hpp"

namespace dueq::client {

namespace {

BrokerEndpoints parse_endpoints(const std::string& list) {
  auto parsed = BrokerEndpoints::parse(list);
  if (!parsed) throw std::invalid_argument(parsed.error().message);
  return std::move(*parsed);
}

ClientError closing_error() {
  return ClientError{"unavailable", "the client was closed before the broker answered", 0};
}

}  // namespace

Connection::Connection(const std::string& endpoints, ClientOptions options)
    : options_(std::move(options)), context_(1), socket_(context_, zmq::socket_type::dealer),
      endpoints_(parse_endpoints(endpoints)), wakeup_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      requests_(options_.timeout_ms, options_.attempts) {
  if (wakeup_.get() < 0) throw std::runtime_error("eventfd failed");
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::reconnect_ivl, 100);
  auto curve = load_client_curve(options_.broker_key, options_.key_file);
  if (!curve) throw std::invalid_argument(curve.error().message);
  apply_client_curve(socket_, *curve);
  link_.emplace(context_, socket_, curve->enabled());
  link_down_since_ms_ = steady_ms();
  socket_.connect(endpoints_.current());
  io_ = std::thread([this] { run(); });
}

void Connection::close() {
  stopping_ = true;
  wake();
  io_.join();
}

void Connection::submit(proto::Enqueue request, Completion done) {
  request.request_id = new_request_id();
  const uint64_t id = request.request_id;
  queue_for_io(Outgoing{id, {}, std::move(done), std::move(request), std::nullopt});
}

void Connection::refuse(ClientError error, Completion done) {
  queue_for_io(Outgoing{0, {}, std::move(done), std::nullopt, std::move(error)});
}

// Wakes the I/O thread only when the queue was empty: it takes the whole
// queue after every wake-up it reads, before it waits again, so a request
// joining a non-empty queue is taken with the one that woke it (a write to
// the eventfd per request was a syscall and often a context switch each).
// A request from a callback, on the I/O thread itself, is taken before
// the thread waits again: no wake-up at all.
void Connection::queue_for_io(Outgoing&& outgoing) {
  bool was_empty = false;
  {
    std::unique_lock lock(incoming_mutex_);
    if (closed_) {
      lock.unlock();
      outgoing.done(std::unexpected(closing_error()));
      return;
    }
    was_empty = incoming_.empty();
    incoming_.push_back(std::move(outgoing));
  }
  if (was_empty && !on_io_thread()) wake();
}

void Connection::wake() {
  const uint64_t one = 1;
  (void)!::write(wakeup_.get(), &one, sizeof one);
}

void Connection::run() {
  const auto send = [this](std::string_view bytes) {
    return socket_.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
  };
  while (!stopping_) {
    // Expired first: a callback answered there may queue a request, which
    // is taken right after instead of after the wait.
    const int64_t now = steady_ms();
    if (requests_.expire(now, [this] { return timeout_error(); }) > 0 && endpoints_.several()) switch_broker();
    switch_if_due(now);
    take_incoming();
    requests_.send_unsent(send);
    const auto events = static_cast<short>(ZMQ_POLLIN | (requests_.has_unsent() ? ZMQ_POLLOUT : 0));
    zmq::pollitem_t items[] = {{socket_.handle(), 0, events, 0},
                               {nullptr, wakeup_.get(), ZMQ_POLLIN, 0},
                               {link_->handle(), 0, ZMQ_POLLIN, 0}};
    int64_t wait_ms = requests_.ms_until_next_deadline(steady_ms());
    if (switch_wanted_) wait_ms = std::max<int64_t>(0, next_switch_ms_ - steady_ms());
    if (options_.connect_timeout_ms > 0 && wait_ms >= 0 && !link_->up())
      wait_ms = std::min(wait_ms, std::max<int64_t>(0, link_down_since_ms_ + options_.connect_timeout_ms - steady_ms()));
    zmq::poll(items, 3, std::chrono::milliseconds(wait_ms));
    bool refused_now = false;
    if (items[2].revents & ZMQ_POLLIN) {
      const bool was_up = link_->up();
      const auto update = link_->read(endpoints_.current());
      if (was_up && !link_->up()) link_down_since_ms_ = steady_ms();
      refused_now = update.refused;
      // A broker that went away is left at once when there is another to
      // try; with one endpoint ZeroMQ reconnects by itself.
      if (update.lost && endpoints_.several()) switch_broker();
    }
    fail_if_link_down(steady_ms(), refused_now);
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t count = 0;
      (void)!::read(wakeup_.get(), &count, sizeof count);
    }
    if (items[0].revents & ZMQ_POLLIN) receive_all();
  }
  // Closed under the lock: a callback answered below that calls again is
  // answered at once instead of joining a queue no one reads.
  std::deque<Outgoing> unsent_requests;
  {
    std::lock_guard lock(incoming_mutex_);
    closed_ = true;
    unsent_requests.swap(incoming_);
  }
  requests_.fail_all(closing_error());
  for (auto& request : unsent_requests) request.done(std::unexpected(closing_error()));
}

void Connection::take_incoming() {
  std::deque<Outgoing> taken;
  {
    std::lock_guard lock(incoming_mutex_);
    taken.swap(incoming_);
  }
  const int64_t now = steady_ms();
  std::vector<QueuedEnqueue> enqueues;
  for (auto& outgoing : taken) {
    if (outgoing.refused) outgoing.done(std::unexpected(std::move(*outgoing.refused)));
    else if (outgoing.enqueue)
      enqueues.push_back({outgoing.request_id, std::move(*outgoing.enqueue), std::move(outgoing.done)});
    else
      requests_.track(outgoing.request_id, std::move(outgoing.bytes), std::move(outgoing.done), now);
  }
  if (enqueues.empty()) return;
  for (auto& frame : merge_enqueues(std::move(enqueues), [this] { return new_request_id(); }))
    requests_.track(frame.request_id, std::move(frame.bytes), std::move(frame.done), now);
}

void Connection::receive_all() {
  zmq::message_t message;
  while (socket_.recv(message, zmq::recv_flags::dontwait)) {
    auto frame = proto::decode(std::string_view(static_cast<const char*>(message.data()), message.size()),
                               proto::kMaxReplyValues);
    if (frame) {
      // A standby: every unanswered request goes to the next broker, the
      // leader it names among them.
      if (const auto* error = std::get_if<proto::ErrorFrame>(&*frame); error != nullptr && error->code == "not_leader") {
        if (options_.follow_leader) endpoints_.learn_leader_from(error->message);
        if (endpoints_.several()) {
          switch_broker();
          continue;
        }
      }
    }
    // A frame that cannot be read names no request to answer: its request
    // times out. So does an error that names none (the broker could not
    // read one from the frame): each request of the many threads sharing
    // this connection is answered by its own reply or times out.
    if (frame) requests_.answer(std::move(*frame));
  }
}

void Connection::switch_broker() { switch_wanted_ = true; }

void Connection::switch_if_due(int64_t now_ms) {
  if (!switch_wanted_ || now_ms < next_switch_ms_) return;
  switch_wanted_ = false;
  try {
    socket_.disconnect(endpoints_.current());
  } catch (const zmq::error_t&) {
    // Not connected there (a refused endpoint): nothing to leave.
  }
  if (link_->up()) link_down_since_ms_ = now_ms;
  link_->forget();
  const bool new_pass = endpoints_.next();
  next_switch_ms_ = new_pass ? now_ms + kPassPauseMs : now_ms;
  socket_.connect(endpoints_.current());
  requests_.send_all_again();
}

ClientError Connection::timeout_error() const {
  const std::string why = link_->diagnosis(endpoints_.current()).text;
  return ClientError{"timeout",
                     "no reply from the broker at " + endpoints_.describe() + " after " + std::to_string(options_.attempts) +
                         " attempts" + (why.empty() ? "" : ": " + why),
                     0};
}

ClientError Connection::link_error() const {
  auto why = link_->diagnosis(endpoints_.current());
  switch (why.problem) {
    case LinkProblem::key_refused:
      return ClientError{"refused", std::move(why.text), 0};
    case LinkProblem::curve_mismatch:
    case LinkProblem::handshake:
    case LinkProblem::not_a_broker:
      return ClientError{"handshake", std::move(why.text), 0};
    default:
      return ClientError{"unavailable", std::move(why.text), 0};
  }
}

void Connection::fail_if_link_down(int64_t now_ms, bool refused_now) {
  if (options_.connect_timeout_ms <= 0 || link_->up() || requests_.ms_until_next_deadline(now_ms) < 0) return;
  if (refused_now || now_ms - link_down_since_ms_ >= options_.connect_timeout_ms) requests_.fail_all(link_error());
}

}  // namespace dueq::client
