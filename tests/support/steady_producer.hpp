#pragma once
// A producer of single jobs that keeps going through a fail-over, for the
// fail-over, standby and Redis Cluster tests: job n is `make(n)`, one every
// `pause`. A job not answered accepted or duplicate (both mean "in the
// store") is sent again with its id after the next new one, so a queue that
// waits does not hold up the rest. What it counts is what a producer was
// promised: every accepted job must run, none before its due time.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.hpp"
#include "dueq/client.hpp"
#include "tests/support/cluster.hpp"

namespace dueq::testing {

class SteadyProducer {
 public:
  using MakeJob = std::function<JobSpec(int n)>;

  // `endpoints`: one broker or a comma-separated list (leader and standbys).
  SteadyProducer(std::string endpoints, MakeJob make, std::chrono::milliseconds pause)
      : thread_([this, endpoints = std::move(endpoints), make = std::move(make), pause] { run(endpoints, make, pause); }) {}
  ~SteadyProducer() { stop(); }
  SteadyProducer(const SteadyProducer&) = delete;
  SteadyProducer& operator=(const SteadyProducer&) = delete;

  void stop() {
    running_ = false;
    if (thread_.joinable()) thread_.join();
  }

  size_t accepted() {
    std::lock_guard lock(mutex_);
    return accepted_.size();
  }
  // id -> due ms of every job accepted so far.
  std::map<std::string, int64_t> accepted_jobs() {
    std::lock_guard lock(mutex_);
    return accepted_;
  }
  // The steady-clock ms of each acceptance, in order.
  std::vector<int64_t> accepted_times() {
    std::lock_guard lock(mutex_);
    return accepted_at_ms_;
  }
  // The longest pause between two acceptances, the later one after `since`
  // (steady ms); -1 when none came after it.
  int64_t longest_gap_after(int64_t since) {
    std::lock_guard lock(mutex_);
    int64_t gap = -1;
    for (size_t i = 1; i < accepted_at_ms_.size(); ++i)
      if (accepted_at_ms_[i] >= since) gap = std::max(gap, accepted_at_ms_[i] - accepted_at_ms_[i - 1]);
    return gap;
  }

  // What the starts in `records` say of the accepted jobs: how many never
  // started, and how many starts were a job's second or later. A start
  // before its job's due time is a test failure here.
  struct Tally {
    size_t lost = 0;
    size_t reruns = 0;
  };
  Tally tally(const std::vector<StartRecord>& records) {
    const auto accepted = accepted_jobs();
    Tally out;
    std::map<std::string, int> starts;
    for (const auto& r : records) {
      if (++starts[r.id] > 1) ++out.reruns;
      if (auto it = accepted.find(r.id); it != accepted.end()) {
        EXPECT_GE(r.start_us, it->second * 1000) << r.id << " started early";
      }
    }
    for (const auto& [id, due] : accepted)
      if (!starts.contains(id)) ++out.lost;
    return out;
  }
  // Every accepted job has a start in `records`.
  bool all_started(const std::vector<StartRecord>& records) { return tally(records).lost == 0; }

 private:
  void run(const std::string& endpoints, const MakeJob& make, std::chrono::milliseconds pause) {
    Client client(endpoints, ClientOptions{.timeout_ms = 500, .attempts = 2});
    std::deque<JobSpec> again;
    auto send = [&](const JobSpec& job) {
      auto result = client.enqueue(job);
      if (!result || (result->status != EnqueueResult::Status::accepted &&
                      result->status != EnqueueResult::Status::duplicate))
        return false;
      std::lock_guard lock(mutex_);
      accepted_[job.id] = job.due_ms;
      accepted_at_ms_.push_back(steady_ms());
      return true;
    };
    for (int n = 0; running_; ++n) {
      for (size_t k = again.size(); k > 0 && running_; --k) {
        JobSpec job = std::move(again.front());
        again.pop_front();
        if (!send(job)) again.push_back(std::move(job));
      }
      JobSpec job = make(n);
      if (!send(job)) again.push_back(std::move(job));
      std::this_thread::sleep_for(pause);
    }
  }

  std::mutex mutex_;
  std::map<std::string, int64_t> accepted_;  // id -> due ms
  std::vector<int64_t> accepted_at_ms_;      // steady, in order
  std::atomic<bool> running_{true};
  std::thread thread_;  // last: it starts once the members above exist
};

}  // namespace dueq::testing
