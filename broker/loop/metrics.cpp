#include "broker/loop/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/build_info.hpp"
#include "common/json_bytes.hpp"

namespace dueq::broker {

void Histogram::observe(double seconds) {
  seconds = std::max(0.0, seconds);
  const auto at = std::lower_bound(kLatencyBounds.begin(), kLatencyBounds.end(), seconds) - kLatencyBounds.begin();
  ++buckets_[static_cast<size_t>(at)];
  sum_ += seconds;
  ++count_;
}

void Metrics::sent(QueueMetrics& q, int64_t now_ms, int64_t due_ms, int64_t created_ms, uint32_t attempt) {
  if (attempt > 1) return;
  q.lateness.observe(static_cast<double>(now_ms - due_ms) / 1e3);
  // A delayed job is not waiting to start before it is due.
  q.enqueue_to_start.observe(static_cast<double>(now_ms - std::max(created_ms, due_ms)) / 1e3);
}

void Metrics::finished(QueueMetrics& q, const std::string& type, int64_t run_ms) {
  auto it = q.run_time.find(type);
  if (it == q.run_time.end())
    it = q.run_time.try_emplace(q.run_time.size() < QueueMetrics::kMaxTypes ? type : QueueMetrics::kOtherTypes).first;
  it->second.observe(static_cast<double>(std::max<int64_t>(0, run_ms)) / 1e3);
}

void Metrics::counters_read(std::vector<proto::QueueStats> counters, int64_t now_ms) {
  for (auto& c : counters) {
    auto& q = state_.queues[c.queue];
    q.history.push_back({now_ms, c.done, c.accepted});
    if (q.history.size() > QueueMetrics::kHistory) q.history.pop_front();
    q.counters = std::move(c);
    q.counted = true;
  }
  state_.counters_read_ms = now_ms;
}

void Metrics::publish(int64_t now_ms) {
  state_.taken_ms = now_ms;
  auto copy = std::make_shared<const MetricsSnapshot>(state_);
  std::lock_guard lock(mutex_);
  published_ = std::move(copy);
  ++published_seq_;
}

std::shared_ptr<const MetricsSnapshot> Metrics::latest() const {
  std::lock_guard lock(mutex_);
  return published_;
}

std::string Metrics::prometheus_text() {
  std::shared_ptr<const MetricsSnapshot> snapshot;
  uint64_t seq = 0;
  {
    std::lock_guard lock(mutex_);
    if (rendered_seq_ == published_seq_) return rendered_;
    snapshot = published_;
    seq = published_seq_;
  }
  std::string text = render_prometheus(*snapshot);
  std::lock_guard lock(mutex_);
  if (rendered_seq_ == UINT64_MAX || seq > rendered_seq_) {
    rendered_seq_ = seq;
    rendered_ = text;
  }
  return text;
}

namespace {

// A label value: backslash, double quote and line feed escaped.
std::string label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// A job key as labels: itself when it is UTF-8, else its base64 and
// key_encoding="base64" (a label value is UTF-8 text).
std::string key_labels(std::string_view key) {
  if (is_utf8(key)) return fmt::format("key=\"{}\"", label(key));
  return fmt::format("key=\"{}\",key_encoding=\"base64\"", base64_encode(key));
}

std::string number(double value) { return fmt::format("{}", value); }

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(std::string_view name, std::string_view labels, double value) {
    out_ += name;
    if (!labels.empty()) out_ += fmt::format("{{{}}}", labels);
    out_ += ' ';
    out_ += number(value);
    out_ += '\n';
  }
  void histogram(std::string_view name, std::string_view labels, const Histogram& h) {
    const std::string prefix = labels.empty() ? "" : std::string(labels) + ",";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kLatencyBounds.size(); ++i) {
      cumulative += h.buckets()[i];
      sample(fmt::format("{}_bucket", name), fmt::format("{}le=\"{}\"", prefix, number(kLatencyBounds[i])),
             static_cast<double>(cumulative));
    }
    sample(fmt::format("{}_bucket", name), prefix + "le=\"+Inf\"", static_cast<double>(h.count()));
    sample(fmt::format("{}_sum", name), labels, h.sum());
    sample(fmt::format("{}_count", name), labels, static_cast<double>(h.count()));
  }

 private:
  std::string& out_;
};

// The per-queue counters and gauges read from Redis, one family each.
struct QueueFamily {
  const char* name;
  const char* type;
  const char* help;
  int64_t (*value)(const proto::QueueStats&);
};
constexpr QueueFamily kQueueFamilies[] = {
    {"dueq_jobs_enqueued_total", "counter", "Jobs accepted into the queue.",
     [](const proto::QueueStats& c) { return c.accepted; }},
    {"dueq_jobs_done_total", "counter", "Jobs whose handler succeeded.",
     [](const proto::QueueStats& c) { return c.done; }},
    {"dueq_jobs_failed_total", "counter",
     "Attempts that failed: the handler failed, timed out, or its worker was lost while running it.",
     [](const proto::QueueStats& c) { return c.retried + c.died - c.unconfirmed - c.expired; }},
    {"dueq_jobs_retried_total", "counter",
     "Deliveries sent back for another one: failed attempts that had attempts left, and deliveries that "
     "went back unstarted.",
     [](const proto::QueueStats& c) { return c.retried; }},
    {"dueq_jobs_dead_total", "counter", "Jobs that went to the dead-letter set.",
     [](const proto::QueueStats& c) { return c.died; }},
    {"dueq_jobs_cancelled_total", "counter", "Jobs cancelled.",
     [](const proto::QueueStats& c) { return c.cancelled; }},
    {"dueq_jobs_expired_total", "counter",
     "Jobs that went to the dead-letter set unstarted: their start-by deadline had passed (of dueq_jobs_dead_total).",
     [](const proto::QueueStats& c) { return c.expired; }},
    {"dueq_jobs_snoozed_total", "counter", "Snoozes handlers asked for: runs put off without an attempt used.",
     [](const proto::QueueStats& c) { return c.snoozed; }},
    {"dueq_jobs_replayed_total", "counter", "Dead letters replayed.",
     [](const proto::QueueStats& c) { return c.replayed; }},
    {"dueq_jobs_purged_total", "counter", "Dead letters purged.",
     [](const proto::QueueStats& c) { return c.purged; }},
    {"dueq_history_trimmed_total", "counter",
     "Finished jobs' kept documents removed by history_retention or history_max (their ids stay for done_retention).",
     [](const proto::QueueStats& c) { return c.history_trimmed; }},
    {"dueq_stale_results_total", "counter",
     "Results rejected because their delivery was no longer current (the job had been delivered again).",
     [](const proto::QueueStats& c) { return c.stale_acks; }},
    {"dueq_stale_extends_total", "counter", "Lease renewals rejected because their delivery was no longer current.",
     [](const proto::QueueStats& c) { return c.stale_extends; }},
    {"dueq_jobs_scheduled", "gauge", "Jobs waiting for their due time.",
     [](const proto::QueueStats& c) { return c.scheduled; }},
    {"dueq_jobs_ready", "gauge", "Jobs due and waiting for a worker.",
     [](const proto::QueueStats& c) { return c.waiting; }},
    {"dueq_jobs_in_flight", "gauge", "Jobs leased to a worker.",
     [](const proto::QueueStats& c) { return c.in_flight; }},
    {"dueq_history_kept", "gauge", "Finished jobs whose whole document is kept (history_retention, history_max).",
     [](const proto::QueueStats& c) { return c.history_kept; }},
    {"dueq_dead_letters", "gauge", "Jobs in the dead-letter set.",
     [](const proto::QueueStats& c) { return c.dead; }},
    {"dueq_queue_paused", "gauge", "1 while the queue is paused (dueq pause): it dispatches nothing.",
     [](const proto::QueueStats& c) -> int64_t { return c.paused_since_ms > 0 ? 1 : 0; }},
    {"dueq_queue_concurrency_limit", "gauge", "The most jobs of the queue running at once (0: no limit).",
     [](const proto::QueueStats& c) { return c.concurrency_limit; }},
    {"dueq_queue_keys_running", "gauge", "Keys holding a turn (docs/keys.md): jobs of theirs running, or retrying in an ordered queue.",
     [](const proto::QueueStats& c) { return c.keys_running; }},
    {"dueq_queue_waiting_for_key", "gauge", "Ready jobs waiting until their key has a turn free (dueq key list names the keys).",
     [](const proto::QueueStats& c) { return c.waiting_for_key; }},
    {"dueq_queue_rate_burst", "gauge", "Jobs the rate limit lets start at once after a quiet spell (0: no rate limit).",
     [](const proto::QueueStats& c) { return c.rate_burst; }},
};

void write_queue_families(Writer& w, const MetricsSnapshot& s) {
  for (const auto& family : kQueueFamilies) {
    w.family(family.name, family.type, family.help);
    for (const auto& [name, q] : s.queues)
      if (q.counted) w.sample(family.name, fmt::format("queue=\"{}\"", label(name)), static_cast<double>(family.value(q.counters)));
  }
  w.family("dueq_queue_rate_limit", "gauge", "Jobs started per second at most (0: no rate limit).");
  for (const auto& [name, q] : s.queues)
    if (q.counted) w.sample("dueq_queue_rate_limit", fmt::format("queue=\"{}\"", label(name)), q.counters.rate_limit);
  w.family("dueq_key_waiting", "gauge",
           "Jobs waiting for a turn of their key, for the 10 keys of a queue with the most (dueq key list names "
           "them all); a key that is not UTF-8 is labeled by its base64, with key_encoding=\"base64\".");
  for (const auto& [name, q] : s.queues)
    if (q.counted)
      for (const auto& top : q.counters.top_keys)
        w.sample("dueq_key_waiting", fmt::format("queue=\"{}\",{}", label(name), key_labels(top.key.data)), static_cast<double>(top.waiting));
  w.family("dueq_queue_lateness_seconds", "gauge",
           "How long the longest-waiting ready job has been due, when the counters were read (0: none waits).");
  for (const auto& [name, q] : s.queues)
    if (q.counted) {
      const int64_t due = q.counters.oldest_ready_due_ms;
      w.sample("dueq_queue_lateness_seconds", fmt::format("queue=\"{}\"", label(name)),
               due <= 0 ? 0.0 : static_cast<double>(std::max<int64_t>(0, s.counters_read_ms - due)) / 1e3);
    }
}

// What the loop measured itself: lateness and enqueue-to-start of first deliveries.
void write_queue_histograms(Writer& w, const MetricsSnapshot& s) {
  w.family("dueq_job_lateness_seconds", "histogram",
           "First deliveries: the moment the broker sent the job to a worker minus its due time.");
  for (const auto& [name, q] : s.queues) w.histogram("dueq_job_lateness_seconds", fmt::format("queue=\"{}\"", label(name)), q.lateness);
  w.family("dueq_job_enqueue_to_start_seconds", "histogram",
           "First deliveries: the moment the broker sent the job to a worker minus the moment it was accepted, or "
           "minus its due time when it was due later.");
  for (const auto& [name, q] : s.queues)
    w.histogram("dueq_job_enqueue_to_start_seconds", fmt::format("queue=\"{}\"", label(name)), q.enqueue_to_start);
  w.family("dueq_job_run_seconds", "histogram",
           "Deliveries: from the broker sending the job to a worker to its result arriving (time in the worker's "
           "buffer included), per queue and job type (at most 20 types a queue, the rest as type=\"(other)\").");
  for (const auto& [name, q] : s.queues)
    for (const auto& [type, h] : q.run_time)
      w.histogram("dueq_job_run_seconds", fmt::format("queue=\"{}\",type=\"{}\"", label(name), label(type)), h);
  w.family("dueq_queue_workers", "gauge", "Registered workers that serve the queue.");
  for (const auto& [name, q] : s.queues) w.sample("dueq_queue_workers", fmt::format("queue=\"{}\"", label(name)), static_cast<double>(q.workers));
}

void write_broker_families(Writer& w, const MetricsSnapshot& s) {
  w.family("dueq_workers", "gauge", "Workers registered with this broker.");
  w.sample("dueq_workers", "", static_cast<double>(s.workers));
  w.family("dueq_worker_capacity", "gauge", "Jobs the registered workers can hold at once, together.");
  w.sample("dueq_worker_capacity", "", static_cast<double>(s.worker_capacity));
  w.family("dueq_worker_jobs_held", "gauge", "Jobs the registered workers hold now, together.");
  w.sample("dueq_worker_jobs_held", "", static_cast<double>(s.jobs_held));
  w.family("dueq_cron_next_tick_timestamp_seconds", "gauge", "When a periodic entry's next tick is due (Unix time).");
  for (const auto& c : s.cron)
    w.sample("dueq_cron_next_tick_timestamp_seconds", fmt::format("entry=\"{}\",queue=\"{}\"", label(c.name), label(c.queue)),
             static_cast<double>(c.next_tick_ms) / 1e3);
  w.family("dueq_redis_round_seconds", "histogram", "A pipelined Redis round: sent to its replies applied.");
  w.histogram("dueq_redis_round_seconds", "", s.redis_round);
  w.family("dueq_leader", "gauge", "1 when this broker leads (serves), 0 when it stands by.");
  w.sample("dueq_leader", "", s.leading ? 1 : 0);
  w.family("dueq_leader_epoch", "gauge", "The epoch of this broker's leadership (0 when it stands by).");
  w.sample("dueq_leader_epoch", "", static_cast<double>(s.epoch));
  w.family("dueq_redis_up", "gauge", "1 when the broker's connection to Redis is up.");
  w.sample("dueq_redis_up", "", s.redis_up ? 1 : 0);
  w.family("dueq_build_info", "gauge", "The commit and build type of this broker, as labels.");
  w.sample("dueq_build_info", fmt::format("commit=\"{}\",build=\"{}\"", label(build_commit()), label(build_type())), 1);
}

}  // namespace

std::string render_prometheus(const MetricsSnapshot& s) {
  std::string out;
  Writer w(out);
  write_queue_families(w, s);
  write_queue_histograms(w, s);
  write_broker_families(w, s);
  return out;
}

}  // namespace dueq::broker
