#include "worker/handler_pool.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/clock.hpp"
#include "common/job_document.hpp"
#include "common/logging.hpp"
#include "worker/wake_policy.hpp"

namespace dueq::worker {

HandlerPool::HandlerPool(std::string worker_id, const std::unordered_map<std::string, Handler>& handlers,
                         std::function<void()> wake_main, bool log_jobs)
    : worker_id_(std::move(worker_id)), handlers_(handlers), wake_main_(std::move(wake_main)), log_jobs_(log_jobs) {}

void HandlerPool::start(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { thread_main(); });
}

void HandlerPool::stop() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    drop_waiting_starts();
  }
  work_cv_.notify_all();
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

// A handler thread hands in its result and takes the next delivery under
// one lock: with short handlers the pool mutex is the hot spot.
void HandlerPool::thread_main() {
  std::optional<proto::JobResult> finished;
  bool finished_unannounced = false;
  while (true) {
    Delivery delivery;
    {
      std::unique_lock lock(mutex_);
      if (finished) {
        // One wake-up per batch: a non-empty list already has one pending.
        if (completed_.empty()) wake_main_();
        completed_.push_back(std::move(*finished));
        finished.reset();
        --running_;
        if (finished_unannounced && --unannounced_running_ == 0 && alone_waiting_ > 0) start_cv_.notify_all();
      }
      ++idle_threads_;
      // While an announce_alone delivery waits or runs, no delivery starts
      // unannounced: a crash then names it alone. A stopping pool runs what
      // is left, as before.
      work_cv_.wait(lock, [&] {
        return closed_ || (!pending_.empty() && (pending_.front().start_check != proto::StartCheck::none ||
                                                 (alone_waiting_ == 0 && alone_running_ == 0)));
      });
      --idle_threads_;
      if (pending_.empty()) return;
      delivery = std::move(pending_.front());
      pending_.pop_front();
      ++running_;
      finished_unannounced = delivery.start_check == proto::StartCheck::none;
      if (finished_unannounced) ++unannounced_running_;
      if (!finished_unannounced && !await_start(lock, delivery)) {
        --running_;
        continue;
      }
    }
    const auto started = std::chrono::steady_clock::now();
    finished = run_delivery(delivery);
    record_handler_time(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started).count());
    if (delivery.start_check != proto::StartCheck::none) {
      // Counted as running until the broker confirms the result: a crash
      // before then would be laid at this job's door too.
      std::lock_guard lock(mutex_);
      announced_unconfirmed_[delivery.token] = delivery.start_check == proto::StartCheck::announce_alone;
    }
  }
}

// An earlier delivery of this job ended with its worker lost before the
// broker saw it start: the broker records this start before the handler
// runs, so if the job kills this process it is charged, and the jobs
// buffered beside it are not. False: the broker said to drop it, or the
// worker is stopping (it was handed back).
bool HandlerPool::await_start(std::unique_lock<std::mutex>& lock, const Delivery& delivery) {
  const uint64_t token = delivery.token;
  const bool alone = delivery.start_check == proto::StartCheck::announce_alone;
  StartGate& gate = start_gates_[token] = StartGate{{delivery.job.queue, delivery.job.id, token}, alone};
  if (alone) ++alone_waiting_;
  start_cv_.wait(lock, [&] {
    if (gate.state != GateState::waiting) return true;
    // An alone one goes first among those that wait, and is announced
    // once no other delivery runs (announced or not), then runs by itself.
    const bool may = alone ? announced_running_ == 0 && unannounced_running_ == 0 : alone_running_ == 0 && alone_waiting_ == 0;
    if (!gate.ready && may) {
      gate.ready = true;
      ++announced_running_;
      if (alone) {
        --alone_waiting_;
        ++alone_running_;
      }
      if (!has_unannounced_starts_) wake_main_();
      has_unannounced_starts_ = true;
    }
    return false;
  });
  if (alone && !gate.ready) {
    --alone_waiting_;
    start_cv_.notify_all();
    work_cv_.notify_all();
  }
  const bool go = gate.state == GateState::go;
  if (!go && gate.ready) end_announced(alone);
  start_gates_.erase(token);
  return go;
}

// An announced delivery ended (ran, or was dropped); under mutex_.
void HandlerPool::end_announced(bool alone) {
  --announced_running_;
  start_cv_.notify_all();
  if (!alone) return;
  --alone_running_;
  work_cv_.notify_all();  // unannounced deliveries may start again
}

std::vector<proto::JobRef> HandlerPool::starts_to_announce() {
  std::vector<proto::JobRef> refs;
  std::lock_guard lock(mutex_);
  if (!has_unannounced_starts_) return refs;
  has_unannounced_starts_ = false;
  for (auto& [token, gate] : start_gates_) {
    if (gate.state != GateState::waiting || !gate.ready || gate.announced) continue;
    gate.announced = true;
    refs.push_back(gate.ref);
  }
  return refs;
}

void HandlerPool::announce_all_again() {
  // Maybe lost with the broker that got them: asked again.
  std::lock_guard lock(mutex_);
  for (auto& [token, gate] : start_gates_) gate.announced = false;
  has_unannounced_starts_ = !start_gates_.empty();
}

std::vector<proto::JobRef> HandlerPool::on_start_reply(const proto::StartReply& reply) {
  std::vector<proto::JobRef> dropped;
  {
    std::lock_guard lock(mutex_);
    for (const auto& ref : reply.go)
      if (auto it = start_gates_.find(ref.token); it != start_gates_.end() && it->second.state == GateState::waiting)
        it->second.state = GateState::go;
    for (const auto& ref : reply.drop) {
      // Re-delivered elsewhere, finished or cancelled: not this worker's.
      auto it = start_gates_.find(ref.token);
      if (it == start_gates_.end() || it->second.state != GateState::waiting) continue;
      it->second.state = GateState::drop;
      dropped.push_back(ref);
    }
  }
  start_cv_.notify_all();
  return dropped;
}

void HandlerPool::confirmed(uint64_t token) {
  std::lock_guard lock(mutex_);
  if (auto a = announced_unconfirmed_.find(token); a != announced_unconfirmed_.end()) {
    end_announced(a->second);
    announced_unconfirmed_.erase(a);
  }
}

// Every waiting gate is dropped; returns their deliveries, which never
// started. Under mutex_.
std::vector<proto::JobRef> HandlerPool::drop_waiting_starts() {
  std::vector<proto::JobRef> dropped;
  for (auto& [token, gate] : start_gates_) {
    if (gate.state != GateState::waiting) continue;
    gate.state = GateState::drop;
    dropped.push_back(gate.ref);
  }
  return dropped;
}

// A moving average over about the last 16 runs; racing threads may lose
// an update, which an average can spare.
void HandlerPool::record_handler_time(double micros) {
  const double mean = mean_handler_us_.load(std::memory_order_relaxed);
  mean_handler_us_.store(mean <= 0 ? micros : mean + (micros - mean) / 16, std::memory_order_relaxed);
}

namespace {

const char* outcome_word(proto::Outcome outcome) {
  switch (outcome) {
    case proto::Outcome::done: return "done";
    case proto::Outcome::failed: return "failed";
    case proto::Outcome::failed_final: return "failed for good";
    case proto::Outcome::cancelled: return "cancelled";
    case proto::Outcome::snoozed: return "snoozed";
    case proto::Outcome::expired: return "expired";
  }
  return "ended";
}

}  // namespace

proto::JobResult HandlerPool::run_delivery(Delivery& delivery) {
  delivery.job.progress_board = &progress_;
  const Job& job = delivery.job;
  proto::JobResult result{job.queue, job.id, delivery.token, proto::Outcome::done, {}};
  const bool log = log_jobs_ && spdlog::should_log(spdlog::level::info);
  const int64_t started_us = log ? steady_us() : 0;
  if (job.start_by_ms > 0 && wall_ms() > job.start_by_ms) {
    // Too late to matter: not started (docs/jobs.md, start-by deadlines).
    result.outcome = proto::Outcome::expired;
    result.error = "expired: not started by " + iso_time(job.start_by_ms);
    if (log) spdlog::info("job {} expired: not started (queue {}, type {})", loggable(job.id), loggable(job.queue), loggable(job.type));
    return result;
  }
  if (log)
    spdlog::info("job {} started: queue {}, type {}, attempt {} of {}", loggable(job.id), loggable(job.queue),
                 loggable(job.type), job.attempt, job.max_attempts);
  progress_.open({job.queue, job.id, delivery.token});
  HandlerResult outcome = run_handler(job);
  progress_.close(delivery.token);
  result.outcome = outcome.status == HandlerResult::Status::done      ? proto::Outcome::done
                   : delivery.cancel->by_user.load()                  ? proto::Outcome::cancelled
                   : outcome.status == HandlerResult::Status::failed  ? proto::Outcome::failed
                   : outcome.status == HandlerResult::Status::snoozed ? proto::Outcome::snoozed
                                                                      : proto::Outcome::failed_final;
  if (result.outcome == proto::Outcome::snoozed)
    result.snooze_ms = std::clamp<int64_t>(outcome.snooze_ms, 0, proto::JobResult::kMaxSnoozeMs);
  result.error = std::move(outcome.error);
  if (result.outcome == proto::Outcome::done && outcome.result.size() > proto::JobResult::kMaxResultBytes) {
    // Refused here as the broker would: the job dies with why (docs/jobs.md, Results).
    result.outcome = proto::Outcome::failed_final;
    result.error = fmt::format("its result of {} bytes is over the {}-byte limit", outcome.result.size(),
                               proto::JobResult::kMaxResultBytes);
  } else if (result.outcome == proto::Outcome::done) {
    result.result.data = std::move(outcome.result);
  }
  if (result.error.size() > proto::kMaxErrorText) result.error.resize(proto::kMaxErrorText);
  if (log)
    spdlog::info("job {} {} in {} ms (queue {}, type {}, attempt {}){}{}", loggable(job.id), outcome_word(result.outcome),
                 (steady_us() - started_us) / 1000, loggable(job.queue), loggable(job.type), job.attempt,
                 result.error.empty() ? "" : ": ", loggable(result.error, 200));
  return result;
}

HandlerResult HandlerPool::run_handler(const Job& job) {
  auto it = handlers_.find(job.type);
  if (it == handlers_.end()) it = handlers_.find("*");
  if (it == handlers_.end()) return HandlerResult::failed("no handler for job type '" + job.type + "' on worker " + worker_id_);
  try {
    return it->second(job);
  } catch (const std::exception& e) {
    return HandlerResult::failed(std::string("handler threw: ") + e.what());
  } catch (...) {
    return HandlerResult::failed("handler threw a non-standard exception");
  }
}

void HandlerPool::submit(std::vector<Delivery>&& deliveries, int64_t now_us) {
  if (deliveries.empty()) return;
  size_t to_wake = 0;
  {
    std::lock_guard lock(mutex_);
    for (auto& d : deliveries) {
      d.queued_us = now_us;
      pending_.push_back(std::move(d));
    }
    // Busy threads take the next delivery themselves; idle ones are woken
    // for the work there is (worker/wake_policy.hpp): notify_all made
    // every thread fight for the mutex, and one wake per no-op job cost
    // more than the jobs.
    to_wake = threads_to_wake(deliveries.size(), idle_threads_, mean_handler_us());
  }
  deliveries.clear();
  for (size_t i = 0; i < to_wake; ++i) work_cv_.notify_one();
}

// A thread woken for several short jobs can meet one long one: the others
// must not wait for it while threads sleep.
int64_t HandlerPool::us_until_unstuck(int64_t now_us) {
  size_t to_wake = 0;
  int64_t wait = -1;
  {
    std::lock_guard lock(mutex_);
    // While an announce_alone delivery waits or runs, the others wait for it.
    if (pending_.empty() || idle_threads_ == 0 || alone_waiting_ > 0 || alone_running_ > 0) return -1;
    const int64_t waited = now_us - pending_.front().queued_us;
    if (waited < kMaxWaitForThreadMicros) {
      wait = kMaxWaitForThreadMicros - waited;
    } else {
      to_wake = std::min(pending_.size(), idle_threads_);
      for (auto& d : pending_) d.queued_us = now_us;  // woken for; judged again from now
      wait = kMaxWaitForThreadMicros;
    }
  }
  for (size_t i = 0; i < to_wake; ++i) work_cv_.notify_one();
  return wait;
}

void HandlerPool::add_result(proto::JobResult result) {
  std::lock_guard lock(mutex_);
  completed_.push_back(std::move(result));
}

std::vector<proto::JobResult> HandlerPool::take_results(int64_t now_us) {
  std::vector<proto::JobResult> done;
  std::lock_guard lock(mutex_);
  if (completed_.empty()) {
    results_due_us_ = -1;
    return done;
  }
  if (results_due_us_ < 0) results_due_us_ = now_us + kResultsLingerUs;
  if (now_us >= 0 && now_us < results_due_us_ && completed_.size() < kResultsPerFrame) return done;
  done.swap(completed_);
  results_due_us_ = -1;
  return done;
}

bool HandlerPool::cancel_unstarted(const proto::JobRef& ref) {
  const proto::JobResult cancelled{ref.queue, ref.id, ref.token, proto::Outcome::cancelled,
                                   "cancelled before it started"};
  {
    std::lock_guard lock(mutex_);
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->job.queue == ref.queue && it->job.id == ref.id) {
        pending_.erase(it);
        completed_.push_back(cancelled);
        wake_main_();
        return true;
      }
    }
    auto it = start_gates_.find(ref.token);
    if (it == start_gates_.end() || it->second.state != GateState::waiting) return false;
    it->second.state = GateState::drop;
    completed_.push_back(cancelled);
    wake_main_();
  }
  start_cv_.notify_all();
  return true;
}

std::vector<proto::JobRef> HandlerPool::take_buffered_past(size_t keep, size_t past) {
  std::vector<proto::JobRef> refs;
  std::lock_guard lock(mutex_);
  if (pending_.size() <= past) return refs;
  while (pending_.size() > keep) {
    const Delivery& d = pending_.back();
    refs.push_back({d.job.queue, d.job.id, d.token});
    pending_.pop_back();
  }
  return refs;
}

std::vector<proto::JobRef> HandlerPool::take_unstarted() {
  std::vector<proto::JobRef> refs;
  {
    std::lock_guard lock(mutex_);
    for (const auto& d : pending_) refs.push_back({d.job.queue, d.job.id, d.token});
    pending_.clear();
    const auto waiting = drop_waiting_starts();
    refs.insert(refs.end(), waiting.begin(), waiting.end());
  }
  start_cv_.notify_all();
  return refs;
}

}  // namespace dueq::worker
