#include "tests/nemesis/unique_holds.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

namespace dueq::nemesis {

namespace {

// How far a finish time the broker wrote and a time the workload read may
// disagree on one host's clock (both in whole ms).
constexpr int64_t kClockSlackMs = 5;

struct Checker {
  const History& h;
  const std::function<const FaultSpan*(int64_t, int64_t)>& fault_near;
  UniqueFindings out;
  std::map<std::string, size_t> starts_of;
  std::map<std::string, int64_t> first_start_ms;

  // When `id` surely finished, or -1 (not finished, not known).
  int64_t finished_ms(const std::string& id) const {
    auto it = h.finals.find(id);
    if (it == h.finals.end()) return -1;
    const auto& s = it->second.state;
    return (s == "done" || s == "dead" || s == "cancelled") && it->second.finished_ms > 0 ? it->second.finished_ms : -1;
  }
  bool ran_again(const std::string& id) const {
    auto it = starts_of.find(id);
    return it != starts_of.end() && it->second > 1;
  }
  // Counts an excuse, or names the violation.
  void judge(bool excused, const std::string& id, const std::string& what) {
    if (excused) ++out.excused;
    else out.violations.push_back(fmt::format("{}: {}", id, what));
  }

  // Two jobs accepted with one key: the later one was answered before the
  // earlier one finished.
  void held_twice(const UniqueAsk& a, const UniqueAsk& b) {
    const int64_t a_end = finished_ms(a.id);
    if (a_end < 0 || b.answered_ms + kClockSlackMs >= a_end || a.answered_ms > b.sent_ms) return;
    judge(ran_again(a.id) || fault_near(a.sent_ms, b.answered_ms) != nullptr, b.id,
          fmt::format("UNIQUE KEY HELD TWICE: accepted with unique key {} {} ms before {}, which holds it, finished",
                      b.unique_key, a_end - b.answered_ms, a.id));
  }

  // A duplicate by its unique key names a job of the key that had not
  // finished when it was asked.
  void held_by(const UniqueAsk& b, const std::map<std::string, const UniqueAsk*>& asked) {
    auto holder = asked.find(b.holder);
    if (holder == asked.end() || holder->second->outcome == "held" || holder->second->unique_key != b.unique_key) {
      out.violations.push_back(fmt::format("{}: answered held by {}, not a job accepted with unique key {}", b.id,
                                           b.holder, b.unique_key));
      return;
    }
    const int64_t end = finished_ms(b.holder);
    if (end < 0 || b.sent_ms <= end + kClockSlackMs) return;
    judge(ran_again(b.holder) || fault_near(end, b.answered_ms) != nullptr, b.id,
          fmt::format("HELD BY A FINISHED JOB: answered held by {}, which finished {} ms before it was asked",
                      b.holder, b.sent_ms - end));
  }

  // A job debounced into X: X was a debounced job of the key that had not
  // surely started (it was scheduled) when the job was asked.
  void debounced_into(const UniqueAsk& b, const std::map<std::string, const UniqueAsk*>& asked) {
    auto holder = asked.find(b.holder);
    if (holder == asked.end() || holder->second->outcome == "held" || holder->second->unique_key != b.unique_key ||
        holder->second->mode != "debounce") {
      out.violations.push_back(fmt::format("{}: answered debounced into {}, not a debounced job of unique key {}", b.id,
                                           b.holder, b.unique_key));
      return;
    }
    auto first = first_start_ms.find(b.holder);
    if (first == first_start_ms.end() || b.sent_ms <= first->second + kClockSlackMs) return;
    judge(ran_again(b.holder) || fault_near(first->second, b.answered_ms) != nullptr, b.id,
          fmt::format("DEBOUNCED INTO A STARTED JOB: answered debounced into {}, which started {} ms before it was asked",
                      b.holder, b.sent_ms - first->second));
  }

  // A debounced job runs with the payload of the last job debounced into it.
  void runs_last_payload(const UniqueAsk& x, const std::vector<const UniqueAsk*>& into) {
    const Start* last = nullptr;
    for (const auto& s : h.starts)
      if (s.id == x.id && (last == nullptr || s.start_us > last->start_us)) last = &s;
    if (last == nullptr || last->payload.empty() || last->payload == "-" || x.payload.empty()) return;
    const std::string& want = into.empty() ? x.payload : into.back()->payload;
    if (last->payload == want) return;
    judge(ran_again(x.id) || fault_near(into.empty() ? x.sent_ms : into.back()->sent_ms, last->start_us / 1000) != nullptr,
          x.id, fmt::format("DEBOUNCED PAYLOAD LOST: ran with payload {}, the last debounced into it was {}", last->payload, want));
  }

  void run() {
    for (const auto& s : h.starts) {
      ++starts_of[s.id];
      auto [it, fresh] = first_start_ms.try_emplace(s.id, s.start_us / 1000);
      if (!fresh) it->second = std::min(it->second, s.start_us / 1000);
    }
    std::map<std::string, const UniqueAsk*> asked;
    std::map<std::string, std::vector<const UniqueAsk*>> by_key;
    for (const auto& u : h.uniques) {
      asked[u.id] = &u;
      if (u.outcome == "held") {
        ++out.held;
      } else {
        out.accepted += u.outcome == "accepted" ? 1 : 0;
        by_key[u.unique_key].push_back(&u);
      }
    }
    out.keys = by_key.size();
    // A debounced job holds its key only while scheduled: two may run at once.
    for (const auto& [key, jobs] : by_key)
      for (size_t i = 0; i < jobs.size(); ++i)
        for (size_t j = i + 1; j < jobs.size(); ++j)
          if (jobs[i]->outcome == "accepted" && jobs[j]->outcome == "accepted" && jobs[i]->mode == "done")
            held_twice(*jobs[i], *jobs[j]);
    std::map<std::string, std::vector<const UniqueAsk*>> debounced;  // holder -> jobs debounced into it, in order
    for (const auto& u : h.uniques) {
      if (u.outcome != "held") continue;
      if (u.mode == "debounce") {
        ++out.debounced;
        debounced_into(u, asked);
        debounced[u.holder].push_back(&u);
      } else {
        held_by(u, asked);
      }
    }
    for (const auto& u : h.uniques)
      if (u.mode == "debounce" && u.outcome == "accepted") runs_last_payload(u, debounced[u.id]);
  }
};

}  // namespace

UniqueFindings check_unique_holds(const History& history,
                                  const std::function<const FaultSpan*(int64_t, int64_t)>& fault_near) {
  Checker c{history, fault_near, {}, {}};
  c.run();
  return std::move(c.out);
}

}  // namespace dueq::nemesis
