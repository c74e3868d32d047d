#include "tests/nemesis/key_order.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace dueq::nemesis {

namespace {

struct KeyedStart {
  std::string id;
  int64_t start_us = 0;
  int64_t due_ms = 0;  // as the broker sent it, 0 when the worker did not record it
};

class KeyChecking {
 public:
  KeyChecking(const History& h, const std::function<const FaultSpan*(int64_t, int64_t)>& blame, int64_t slack_ms)
      : h_(h), blame_(blame), slack_ms_(slack_ms) {
    for (const auto& job : h.accepted)
      if (h.keys.contains(job.id)) jobs_[job.id] = &job;
    for (const auto& id : h.cancels) touched_.insert(id);
    for (const auto& [id, due] : h.reschedules) touched_.insert(id);
  }

  KeyOrderFindings run() {
    std::map<std::string, std::vector<KeyedStart>> by_key;
    for (const auto& s : h_.starts)
      if (auto it = h_.keys.find(s.id); it != h_.keys.end()) {
        by_key[it->second].push_back({s.id, s.start_us, s.due_ms});
        if (s.due_ms > 0) sent_due_[s.id] = s.due_ms;
      }
    out_.keyed_jobs = jobs_.size();
    out_.keys = by_key.size();
    for (auto& [key, starts] : by_key) {
      std::sort(starts.begin(), starts.end(), [](const auto& a, const auto& b) { return a.start_us < b.start_us; });
      check_turns(key, starts);
      check_due_order(key, starts);
    }
    return std::move(out_);
  }

 private:
  void violation_unless_excused(int64_t before_us, int64_t after_us, const std::string& what, size_t& excused) {
    if (blame_(before_us, after_us) != nullptr) ++excused;
    else out_.violations.push_back(what);
  }

  // One job of a key at a time, and no job again once another took the turn.
  // A job started again is a run again: a fault between its last start and
  // this one explains it, as it explains any run again (a fail-over that
  // lost the end of its run, and the turns taken after it, runs the key's
  // jobs from where the store was: seed 20270152 saw two jobs of a key run
  // again, in due order, 50 s after the fail-over that lost their ends).
  void check_turns(const std::string& key, const std::vector<KeyedStart>& starts) {
    std::set<std::string> passed;  // jobs of the key a later job's start followed
    std::map<std::string, int64_t> last_start_us;
    if (!starts.empty()) last_start_us[starts.front().id] = starts.front().start_us;
    for (size_t i = 1; i < starts.size(); ++i) {
      const auto& a = starts[i - 1];
      const auto& b = starts[i];
      const auto before = last_start_us.find(b.id);
      const int64_t b_before_us = before == last_start_us.end() ? a.start_us : std::min(before->second, a.start_us);
      last_start_us[b.id] = b.start_us;
      if (a.id == b.id) continue;  // a redelivery: the job kept its turn
      passed.insert(a.id);
      if (b.start_us < a.start_us + kOrderedRunMs * 1000)
        violation_unless_excused(a.start_us, b.start_us,
                                 fmt::format("{}: key {}: started {} us after {} started, while it ran", b.id, key,
                                             b.start_us - a.start_us, a.id),
                                 out_.excused_turns);
      if (passed.contains(b.id))
        violation_unless_excused(b_before_us, b.start_us,
                                 fmt::format("{}: key {}: started again after {} had taken the key's turn", b.id, key, a.id),
                                 out_.excused_turns);
    }
  }

  // A key's jobs first start in due order: a job that started first while
  // another of its key, due earlier, had been accepted and due for the
  // slack, broke it (jobs an operator moved or cancelled are left out). A
  // job's due time is the one the broker sent with it: a job asked due now
  // is due when the broker took it, which its producer does not know.
  void check_due_order(const std::string& key, const std::vector<KeyedStart>& starts) {
    std::vector<std::pair<std::string, int64_t>> first;  // id, first start us, in start order
    std::set<std::string> seen;
    for (const auto& s : starts)
      if (seen.insert(s.id).second) first.emplace_back(s.id, s.start_us);
    for (size_t i = 0; i < first.size(); ++i) {
      const AcceptedJob* y = job(first[i].first);
      if (y == nullptr) continue;
      for (size_t j = i + 1; j < first.size(); ++j) {
        const AcceptedJob* x = job(first[j].first);
        if (x == nullptr || !x->surely) continue;
        const int64_t x_due = due_of(*x), y_due = due_of(*y);
        if (x_due == 0 || y_due == 0 || x_due >= y_due) continue;
        const int64_t y_start_ms = first[i].second / 1000;
        if (x->answered_ms + slack_ms_ > y_start_ms || x_due + slack_ms_ > y_start_ms) continue;
        violation_unless_excused(first[i].second, first[j].second,
                                 fmt::format("{}: key {}: started before {}, due {} ms earlier and waiting", y->id, key,
                                             x->id, y_due - x_due),
                                 out_.excused_order);
      }
    }
  }

  // The due time the broker sent, else the one asked (0: now, not known).
  int64_t due_of(const AcceptedJob& job) const {
    auto it = sent_due_.find(job.id);
    return it != sent_due_.end() ? it->second : job.due_ms;
  }

  const AcceptedJob* job(const std::string& id) const {
    if (touched_.contains(id)) return nullptr;
    auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : it->second;
  }

  const History& h_;
  const std::function<const FaultSpan*(int64_t, int64_t)>& blame_;
  int64_t slack_ms_;
  std::map<std::string, const AcceptedJob*> jobs_;
  std::set<std::string> touched_;
  std::map<std::string, int64_t> sent_due_;  // id -> the due ms a start of it was sent with
  KeyOrderFindings out_;
};

}  // namespace

KeyOrderFindings check_key_order(const History& history, const std::function<const FaultSpan*(int64_t, int64_t)>& blame,
                                 int64_t promote_slack_ms) {
  return KeyChecking(history, blame, promote_slack_ms).run();
}

}  // namespace dueq::nemesis
