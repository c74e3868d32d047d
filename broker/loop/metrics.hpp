#pragma once
// What the broker exports to Prometheus (broker/http/http_server.hpp serves it).
// The event loop counts as it works (jobs sent to workers, rounds applied)
// and once a second reads every queue's counters from Redis (the stats call
// that answers `dueq stats`); it then publishes a snapshot, which the HTTP
// threads render. The loop never waits for a scrape, and a scrape never
// touches the loop's state: the snapshot is a copy behind a mutex.
#include <array>
#include <deque>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/protocol.hpp"

namespace dueq::broker {

// Upper bounds, in seconds, of the latency histograms' buckets.
inline constexpr std::array<double, 20> kLatencyBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                         0.1,    0.25,  0.5,    1,     2.5,  5,     10,
                                                         30,     60,    300,    900,   3600, 86400};

class Histogram {
 public:
  void observe(double seconds);
  // Per bucket (not cumulative); the last one is +Inf.
  const std::array<uint64_t, kLatencyBounds.size() + 1>& buckets() const { return buckets_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::array<uint64_t, kLatencyBounds.size() + 1> buckets_{};
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct QueueMetrics {
  bool counted = false;  // counters read at least once
  proto::QueueStats counters;  // as `dueq stats` shows them
  // The last kHistory reads (one a second): wall ms, done, accepted; the
  // dashboard's rates and sparklines.
  static constexpr size_t kHistory = 120;
  std::deque<std::array<int64_t, 3>> history;
  Histogram lateness;          // first deliveries: sent to a worker minus due
  Histogram enqueue_to_start;  // first deliveries: sent to a worker minus accepted, or minus due when due later
  // Per job type (at most kMaxTypes, the rest under kOtherTypes): from the
  // delivery's TASKS frame to its RESULTS, any outcome.
  static constexpr size_t kMaxTypes = 20;
  static constexpr const char* kOtherTypes = "(other)";
  std::map<std::string, Histogram> run_time;
  uint64_t workers = 0;  // registered workers that serve the queue
};

// A job a worker holds, as the dashboard lists it.
struct HeldJobRow {
  std::string queue, id;
  bool started = false;  // its worker announced the start (else: sent, maybe buffered)
  int64_t held_ms = 0;   // since it was sent
  int32_t progress_percent = -1;  // its handler's last report (-1: none)
  std::string progress_text;
};

// One registered worker, as the dashboard lists it.
struct WorkerRow {
  std::string id;
  std::string key;  // its allow-list name ("" without CURVE)
  std::vector<std::string> queues;
  uint32_t capacity = 0;
  int64_t held = 0;  // jobs sent to it and not finished
  bool draining = false;
  int64_t silent_ms = 0;  // since it was last heard from
  std::vector<HeldJobRow> jobs;  // the oldest kMaxJobsPerWorker it holds
  static constexpr size_t kMaxJobsPerWorker = 20;
};

// One periodic entry, as the dashboard lists it.
struct CronRow {
  std::string name, queue, schedule, time_zone;
  int64_t next_tick_ms = 0;  // 0: none within the search horizon
};

struct MetricsSnapshot {
  int64_t taken_ms = 0;           // wall clock
  int64_t counters_read_ms = 0;   // when the queues' counters were last read (wall), 0 = never
  bool leading = false;
  uint64_t epoch = 0;
  bool redis_up = false;
  std::map<std::string, QueueMetrics> queues;
  uint64_t workers = 0;
  uint64_t worker_capacity = 0;
  uint64_t jobs_held = 0;  // jobs sent to workers and not yet finished
  std::vector<WorkerRow> worker_rows;  // at most kMaxWorkerRows
  std::vector<CronRow> cron;
  Histogram redis_round;   // a round's send to its replies applied
};

class Metrics {
 public:
  // Event loop ------------------------------------------------------------
  // The queue's histograms (the reference stays valid).
  QueueMetrics& queue(const std::string& name) { return state_.queues[name]; }
  // A job sent to a worker: its first delivery counts towards the
  // histograms (a retry's due time is its backoff's end, not the record's).
  static void sent(QueueMetrics& q, int64_t now_ms, int64_t due_ms, int64_t created_ms, uint32_t attempt);
  // A delivery's result arrived `run_ms` after it was sent.
  static void finished(QueueMetrics& q, const std::string& type, int64_t run_ms);
  // How many registered workers serve each queue (queues no worker serves: 0).
  void set_queue_workers(const std::map<std::string, uint64_t>& counts) {
    for (auto& [name, q] : state_.queues) {
      auto it = counts.find(name);
      q.workers = it == counts.end() ? 0 : it->second;
    }
  }
  void round_applied(int64_t micros) { state_.redis_round.observe(static_cast<double>(micros) / 1e6); }
  void counters_read(std::vector<proto::QueueStats> counters, int64_t now_ms);
  static constexpr size_t kMaxWorkerRows = 1'000;
  void set_workers(uint64_t workers, uint64_t capacity, uint64_t held, std::vector<WorkerRow> rows) {
    state_.workers = workers;
    state_.worker_capacity = capacity;
    state_.jobs_held = held;
    state_.worker_rows = std::move(rows);
  }
  void set_cron(std::vector<CronRow> rows) { state_.cron = std::move(rows); }
  // Health, also from a standby broker's loop.
  void set_health(bool leading, uint64_t epoch, bool redis_up) {
    state_.leading = leading;
    state_.epoch = epoch;
    state_.redis_up = redis_up;
    leading_.store(leading, std::memory_order_relaxed);
    redis_up_.store(redis_up, std::memory_order_relaxed);
  }
  // The loop reads the counters from Redis this often (when something scrapes).
  static constexpr int64_t kRefreshMs = 1'000;
  bool refresh_due(int64_t now_ms) const { return now_ms >= next_refresh_ms_; }
  void refresh_started(int64_t now_ms) { next_refresh_ms_ = now_ms + kRefreshMs; }
  int64_t ms_until_refresh(int64_t now_ms) const { return std::max<int64_t>(0, next_refresh_ms_ - now_ms); }
  // Copies the loop's state for the HTTP threads.
  void publish(int64_t now_ms);

  // HTTP threads ----------------------------------------------------------
  std::shared_ptr<const MetricsSnapshot> latest() const;
  bool leading() const { return leading_.load(std::memory_order_relaxed); }
  bool redis_up() const { return redis_up_.load(std::memory_order_relaxed); }
  // The text exposition format (version 0.0.4) of the latest snapshot,
  // rendered once per snapshot.
  std::string prometheus_text();

 private:
  MetricsSnapshot state_;  // event loop only
  int64_t next_refresh_ms_ = 0;
  std::atomic<bool> leading_{false};
  std::atomic<bool> redis_up_{false};
  mutable std::mutex mutex_;  // guards the four below
  std::shared_ptr<const MetricsSnapshot> published_ = std::make_shared<MetricsSnapshot>();
  uint64_t published_seq_ = 0;
  uint64_t rendered_seq_ = UINT64_MAX;
  std::string rendered_;
};

// The exposition text of one snapshot.
std::string render_prometheus(const MetricsSnapshot& snapshot);

}  // namespace dueq::broker
