#include "tests/nemesis/flow_groups.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace dueq::nemesis {

namespace {

// How far an end time a broker wrote and a start a worker read may
// disagree on one host's clock (both in whole ms).
constexpr int64_t kGroupClockSlackMs = 5;

struct GroupChecker {
  const History& h;
  const std::function<const FaultSpan*(int64_t, int64_t)>& fault_near;
  GroupFindings out;
  std::map<std::string, std::vector<int64_t>> starts_ms;        // id -> its starts, oldest first
  std::map<std::string, std::vector<const GroupJob*>> members;  // group -> its members (not its root or callbacks)
  std::map<std::string, const GroupJob*> by_id;

  const FinalState* final_of(const std::string& id) const {
    auto it = h.finals.find(id);
    return it == h.finals.end() || it->second.state.empty() ? nullptr : &it->second;
  }
  std::string state_of(const std::string& id) const {
    const FinalState* f = final_of(id);
    return f == nullptr ? "" : f->state;
  }
  void judge(bool excused, const std::string& id, const std::string& what) {
    if (excused) ++out.excused;
    else out.violations.push_back(fmt::format("{}: {}", id, what));
  }

  // `after` first started once `before` had settled: after its first start
  // (a delivery of it sent again may start later, beside a start that
  // already ended it), and not before the broker wrote its end (a broker's
  // clock stepped, or a fail-over that lost the end, excuses that).
  void started_after(const std::string& after, const std::string& before, const char* what) {
    const auto& late = starts_ms[after];
    const auto& early = starts_ms[before];
    if (late.empty()) return;
    if (!early.empty() && early.front() >= late.front()) {
      out.violations.push_back(fmt::format("{}: {} STARTED BEFORE {} EVER DID, {} ms earlier", after, what, before,
                                           early.front() - late.front()));
      return;
    }
    const FinalState* end = final_of(before);
    if (end == nullptr || end->finished_ms <= 0 || end->finished_ms <= late.front() + kGroupClockSlackMs) return;
    judge(fault_near(late.front(), end->finished_ms) != nullptr, after,
          fmt::format("{} STARTED {} ms BEFORE {} ENDED", what, end->finished_ms - late.front(), before));
  }
  void ran_at_most_once(const std::string& id, const char* what) {
    const auto& runs = starts_ms[id];
    if (runs.size() > 1)
      judge(fault_near(runs.front(), runs.back()) != nullptr, id, fmt::format("{} RAN {} TIMES", what, runs.size()));
  }
  void never_ran(const std::string& id, const char* what) {
    const auto& runs = starts_ms[id];
    if (!runs.empty()) judge(fault_near(runs.front(), runs.back()) != nullptr, id, fmt::format("{} ran {} times", what, runs.size()));
  }

  // A job of a stored group ended as its type says, unless a child failed it.
  void check_end(const GroupJob& job) {
    ++out.jobs;
    const std::string state = state_of(job.id);
    if (state.empty()) return out.violations.push_back(job.id + ": LOST: a job of a stored flow or batch, and the broker does not know it");
    if (state != "done" && state != "dead" && state != "cancelled")
      return out.violations.push_back(fmt::format("{}: UNFINISHED: still '{}' after the run settled", job.id, state));
    if (job.role != 'j') return;  // the batch's rules
    if (job.type == "fail" && state != "dead") out.violations.push_back(fmt::format("{}: a job that always fails ended {}", job.id, state));
    if (state == "cancelled") out.violations.push_back(job.id + ": cancelled, but nobody asked");
  }

  // The children that ended dead or cancelled under fail_parent: any of
  // them may be the one that failed the parent (the first to end did).
  std::vector<std::string> failing_children(const std::string& group) {
    std::vector<std::string> out;
    for (const GroupJob* child : members[group]) {
      const std::string s = state_of(child->id);
      if (child->policy == 'f' && (s == "dead" || s == "cancelled")) out.push_back(child->id);
    }
    return out;
  }

  void check_flow(const std::string& parent) {
    ++out.flows;
    const std::string group = "f" + parent;
    const auto failed = failing_children(group);
    const FinalState* end = final_of(parent);
    if (end == nullptr) return;  // named by check_end
    if (!failed.empty()) {
      ++out.parents_failed;
      const bool named = std::any_of(failed.begin(), failed.end(), [&](const std::string& c) { return end->error.starts_with("child " + c + " "); });
      if (end->state != "dead" || !named)
        out.violations.push_back(fmt::format("{}: its child {} failed it, but it is {} ('{}')", parent, failed.front(), end->state, end->error));
      never_ran(parent, "A PARENT ITS CHILD FAILED");
      return;
    }
    if (end->state != "done") {
      out.violations.push_back(fmt::format("{}: no child failed it, but it is {} ('{}')", parent, end->state, end->error));
      return;
    }
    ++out.parents_ran;
    for (const GroupJob* child : members[group]) started_after(parent, child->id, "A PARENT");
    ran_at_most_once(parent, "A PARENT");
  }

  void check_batch(const std::string& group, const GroupJob* success, const GroupJob* complete) {
    ++out.batches;
    if (complete == nullptr || success == nullptr || !complete->surely) return;  // not surely closed
    const auto& jobs = members[group];
    const bool all_done = std::all_of(jobs.begin(), jobs.end(), [&](const GroupJob* m) { return state_of(m->id) == "done"; });
    if (state_of(complete->id) == "done") ++out.callbacks_ran;
    else out.violations.push_back(fmt::format("{}: the complete callback ended {}", complete->id, state_of(complete->id)));
    for (const GroupJob* m : jobs) started_after(complete->id, m->id, "A COMPLETE CALLBACK");
    ran_at_most_once(complete->id, "A COMPLETE CALLBACK");
    const std::string s = state_of(success->id);
    if (all_done) {
      if (s != "done") out.violations.push_back(fmt::format("{}: every member is done, but the success callback is {}", success->id, s));
      for (const GroupJob* m : jobs) started_after(success->id, m->id, "A SUCCESS CALLBACK");
      ran_at_most_once(success->id, "A SUCCESS CALLBACK");
      ++out.callbacks_ran;
    } else {
      if (s != "cancelled") out.violations.push_back(fmt::format("{}: a member failed, but the success callback is {}", success->id, s));
      never_ran(success->id, "A SUCCESS CALLBACK OF A FAILED BATCH");
      ++out.successes_cancelled;
    }
  }

  GroupFindings run() {
    for (const auto& s : h.starts) starts_ms[s.id].push_back(s.start_us / 1000);
    for (auto& [id, runs] : starts_ms) std::sort(runs.begin(), runs.end());
    std::map<std::string, bool> group_surely;  // every job of the group surely stored
    std::map<std::string, const GroupJob*> success, complete;
    for (const auto& job : h.group_jobs) {
      by_id[job.id] = &job;
      if (job.role == 's') success[job.group] = &job;
      else if (job.role == 'c') complete[job.group] = &job;
      else if (!(job.group.starts_with("f") && job.parent.empty())) members[job.group].push_back(&job);  // not a flow's root
      auto [it, added] = group_surely.emplace(job.group, job.surely);
      it->second = it->second && (job.role != 'j' || job.surely);
    }
    for (const auto& job : h.group_jobs)
      if (job.surely) check_end(job);
    for (const auto& [group, surely] : group_surely) {
      if (!surely) continue;
      if (group.starts_with("f")) check_flow(group.substr(1));
      else check_batch(group, success.count(group) ? success[group] : nullptr, complete.count(group) ? complete[group] : nullptr);
    }
    check_counters();
    return std::move(out);
  }

  // The flows queue's counters agree with what its jobs ended as.
  void check_counters() {
    if (h.fact("flow_stats_accepted") < 0) return;  // a run before flows
    size_t found = 0, done = 0, dead = 0, cancelled = 0;
    for (const auto& job : h.group_jobs) {
      const std::string s = state_of(job.id);
      if (s.empty()) continue;
      ++found;
      done += s == "done";
      dead += s == "dead";
      cancelled += s == "cancelled";
    }
    const auto agree = [&](const char* counter, size_t counted) {
      if (h.fact(counter) != static_cast<int64_t>(counted))
        out.violations.push_back(fmt::format("run: {} says {}, the history {}", counter, h.fact(counter), counted));
    };
    agree("flow_stats_accepted", found);
    agree("flow_stats_done", done);
    agree("flow_stats_dead", dead);
    agree("flow_stats_cancelled", cancelled);
    agree("flow_stats_in_flight", 0);
  }
};

}  // namespace

GroupFindings check_groups(const History& history, const std::function<const FaultSpan*(int64_t, int64_t)>& fault_near) {
  return GroupChecker{history, fault_near, {}, {}, {}, {}}.run();
}

}  // namespace dueq::nemesis
