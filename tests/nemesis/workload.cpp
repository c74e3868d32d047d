#include "tests/nemesis/workload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>

#include "common/clock.hpp"
#include "tests/nemesis/history.hpp"

namespace dueq::nemesis {

namespace {

using namespace std::chrono_literals;

JobSpec draw_job(std::mt19937_64& rng, const WorkloadOptions& o, const std::string& queue, const std::string& id) {
  JobSpec job{queue, "noop", "", id, 0, 3};
  const int64_t kind = static_cast<int64_t>(rng() % 100);
  if (kind < 12) {
    job.type = "sleep";
    job.payload = std::to_string(100 + rng() % 1400);
  } else if (kind < 14) {
    // Snoozed by the first worker process that runs it (kSnoozeMs), then done.
    job.type = "snooze_once";
    job.payload = std::to_string(kSnoozeMs);
  } else if (kind < 18) {
    // Its handler returns its payload, the id: a producer waits for it (waits.tsv).
    job.type = "echo";
    job.payload = id;
  } else if (kind < 20) {
    job.type = "fail";
    job.payload = "on purpose";
    job.max_attempts = 2;
  } else if (rng() % 500 == 0) {
    // A poison job kills every worker it is sent to (and re-delivers the
    // jobs running beside it) until it is charged its attempts.
    job.type = "crash";
    job.max_attempts = 2;
  }
  if (rng() % 2 == 0) {
    const int64_t ahead = static_cast<int64_t>(rng() % static_cast<uint64_t>(o.due_horizon_ms));
    job.due_ms = std::min(wall_ms() + ahead, o.last_due_ms);
  }
  return job;
}

}  // namespace

Workload::Workload(std::filesystem::path dir, WorkloadOptions options)
    : dir_(std::move(dir)), options_(std::move(options)), accepted_file_(dir_ / "accepted.tsv", std::ios::app) {
  for (int p = 0; p < options_.producers; ++p) threads_.emplace_back([this, p] { produce(p); });
  for (size_t q = 0; q < options_.new_queues.size(); ++q) threads_.emplace_back([this, q] { produce_new_queue(q); });
  threads_.emplace_back([this] { operate(); });
  threads_.emplace_back([this] { produce_transient(); });
  if (!options_.ordered_queue.empty()) threads_.emplace_back([this] { produce_ordered(); });
  if (!options_.fair_queue.empty()) threads_.emplace_back([this] { produce_fair(); });
  threads_.emplace_back([this] { produce_unique(); });
  if (!options_.flow_queue.empty()) threads_.emplace_back([this] { produce_groups(); });
  for (int w = 0; w < 2; ++w) threads_.emplace_back([this] { wait_for_echoes(); });
}

Workload::~Workload() { stop(); }

void Workload::stop() {
  producing_ = false;
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void Workload::record(const JobSpec& job, bool surely) {
  std::lock_guard lock(mutex_);
  accepted_file_ << job.id << '\t' << job.type << '\t' << job.due_ms << '\t' << job.max_attempts << '\t'
                 << (surely ? "accepted" : "unknown") << '\t' << wall_ms() << '\t' << job.queue << '\n';
  accepted_file_.flush();
  if (surely) {
    ++accepted_count_;
    if (job.due_ms > 0 && job.type != "echo") cancellable_.push_back({job.id, job.queue, job.type, job.due_ms});
    if (job.type == "echo" && echoes_.size() < 1'000) echoes_.emplace_back(job.id, job.queue);
  }
}

void Workload::wait_for_echoes() {
  Client client(options_.endpoints, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  while (producing_) {
    std::optional<std::pair<std::string, std::string>> next;
    {
      std::lock_guard lock(mutex_);
      if (!echoes_.empty()) {
        next = std::move(echoes_.front());
        echoes_.pop_front();
      }
    }
    if (!next) {
      std::this_thread::sleep_for(50ms);  // none accepted yet: look again
      continue;
    }
    // Up to 30 s, 2 s at a time: stop() joins this thread, and the run
    // heals its faults and restarts its workers only after that.
    const int64_t asked = wall_ms();
    std::expected<JobEnd, ClientError> end = JobEnd{};
    while (producing_ && end && end->state == JobEnd::State::pending && wall_ms() - asked < 30'000)
      end = client.wait(next->first, next->second, 2s);
    if (!end || (!producing_ && end->state == JobEnd::State::pending)) continue;  // unanswered, or cut short: nothing learned
    static constexpr const char* kStates[] = {"done", "dead", "cancelled", "pending", "unknown"};
    append_line(dir_ / "waits.tsv", {next->first, std::to_string(asked), std::to_string(wall_ms()),
                                     kStates[static_cast<int>(end->state)], hex(end->result), hex(end->error)});
  }
}

void Workload::produce(int producer) {
  std::mt19937_64 rng(options_.seed * 7919 + static_cast<uint64_t>(producer));
  Client client(options_.endpoints, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  for (int64_t n = 0; producing_; ++n) {
    std::vector<JobSpec> batch;
    for (int i = 0; i < options_.batch; ++i) {
      // The trailing dot makes an id a prefix of no other (reschedule_one).
      JobSpec job = draw_job(rng, options_, options_.queue, fmt::format("p{}-{}.", producer, n * options_.batch + i));
      // One in 25 noop jobs must start within 4 s of its due time (or of
      // now): past that it expires (deadlines.tsv).
      if (job.type == "noop" && rng() % 25 == 0) {
        job.start_by_ms = std::max(job.due_ms, wall_ms()) + kStartWithinMs;
        append_line(dir_ / "deadlines.tsv", {job.id, std::to_string(job.start_by_ms)});
      }
      // One in 8 jobs that hold no unique key (a debounce would give a job
      // another's record) carries a trace context: every start of it must
      // be handed the one it was sent with (traces.tsv).
      if (job.unique_until == UniqueUntil::none && rng() % 8 == 0) {
        job.traceparent = fmt::format("00-{:016x}{:016x}-{:016x}-01", rng() | 1, rng(), rng() | 1);
        append_line(dir_ / "traces.tsv", {job.id, job.traceparent});
      }
      batch.push_back(std::move(job));
    }
    send(client, std::move(batch));
    std::this_thread::sleep_for(100ms);
  }
}

// Unique jobs of the main queue (docs/keys.md): three in four held until
// done, with four unique keys between them, the fourth debounced (due 1 to
// 2 s on, at most 1.5 s past its first enqueue) with two keys of its own:
// one job a request, each asked again with its id until answered (a retry
// of an accepted one is answered duplicate by its id); unique.tsv says how
// each was answered.
void Workload::produce_unique() {
  std::mt19937_64 rng(options_.seed * 7919 + 32'452'843);
  Client client(options_.endpoints, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  std::map<std::string, int64_t> debounce_deadline;  // a debounced job let in -> the latest a debounce may move it to (at most)
  for (int64_t n = 0; producing_; ++n) {
    JobSpec job{options_.queue, "sleep", std::to_string(100 + rng() % 300), fmt::format("u{}.", n), 0, 3};
    const bool debounced = n % 4 == 3;
    job.unique_key = debounced ? fmt::format("db-{}", rng() % 2) : fmt::format("uk-{}", rng() % 4);
    job.unique_until = debounced ? UniqueUntil::debounce : UniqueUntil::done;
    job.unique_for_ms = debounced ? 1'500 : 0;
    if (debounced) job.due_ms = std::min(wall_ms() + 1'000 + static_cast<int64_t>(rng() % 1'000), options_.last_due_ms);
    else if (rng() % 2 == 0) job.due_ms = std::min(wall_ms() + static_cast<int64_t>(rng() % 2'000), options_.last_due_ms);
    const int64_t sent_ms = wall_ms(), give_up_at = steady_ms() + kAskAgainMs;
    std::optional<EnqueueResult> answer;
    for (bool first = true; !answer && (first || steady_ms() < give_up_at); first = false) {
      if (!first) {
        append_line(dir_ / "asks.tsv", {job.id, std::to_string(wall_ms())});
        std::this_thread::sleep_for(200ms);
      }
      auto r = client.enqueue(job);
      if (r && r->status != EnqueueResult::Status::overloaded) answer = *r;
    }
    const std::string at = std::to_string(wall_ms()), mode = debounced ? "debounce" : "done";
    if (!answer) {
      record(job, false);
      append_line(dir_ / "unique.tsv", {job.id, job.unique_key, "unknown", std::to_string(sent_ms), at, "", mode, job.payload});
    } else if (answer->status == EnqueueResult::Status::duplicate && !answer->existing_id.empty()) {
      append_line(dir_ / "unique.tsv",
                  {job.id, job.unique_key, "held", std::to_string(sent_ms), at, answer->existing_id, mode, job.payload});
      // A debounce moves the holder to this job's due time, capped by its
      // deadline (the broker's clock when it let it in, plus the max wait:
      // at least its ask plus the max wait): told as a reschedule, so that
      // the checker takes its start from the earlier one.
      if (auto d = debounce_deadline.find(answer->existing_id); debounced && d != debounce_deadline.end())
        append_line(dir_ / "reschedules.tsv", {answer->existing_id, std::to_string(std::min(job.due_ms, d->second))});
    } else if (answer->status == EnqueueResult::Status::rejected) {
      ++rejected_;
      fmt::print("REJECTED {}: {}\n", job.id, answer->reason);
    } else {
      record(job, true);
      append_line(dir_ / "unique.tsv", {job.id, job.unique_key, "accepted", std::to_string(sent_ms), at, "", mode, job.payload});
      if (debounced) debounce_deadline[job.id] = sent_ms + job.unique_for_ms;
    }
    std::this_thread::sleep_for(200ms);
  }
}

std::optional<bool> Workload::ask_group(const std::function<std::expected<GroupResult, ClientError>()>& request) {
  const int64_t give_up_at = steady_ms() + kAskAgainMs;
  for (bool first = true; first || steady_ms() < give_up_at; first = false) {
    if (!first) std::this_thread::sleep_for(200ms);
    auto r = request();
    if (!r || r->status == GroupResult::Status::overloaded) continue;
    if (r->status == GroupResult::Status::accepted || r->status == GroupResult::Status::duplicate) return true;
    ++rejected_;
    fmt::print("REJECTED group request of {}: {} ({})\n", r->ids.empty() ? "a close" : r->ids.front(), r->reason,
               static_cast<int>(r->status));
    return std::nullopt;
  }
  return false;
}

void Workload::produce_groups() {
  std::mt19937_64 rng(options_.seed * 7919 + 49'979'687);
  Client client(options_.endpoints, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  const std::string& queue = options_.flow_queue;
  // A noop, a short sleep, or a job that fails for good (one attempt).
  auto draw = [&](const std::string& id) {
    JobSpec job{queue, "noop", "", id, 0, 3};
    const auto kind = rng() % 10;
    if (kind < 2) job = JobSpec{queue, "fail", "on purpose", id, 0, 1};
    else if (kind < 4) job.type = "sleep", job.payload = std::to_string(50 + rng() % 400);
    if (rng() % 3 == 0) job.due_ms = std::min(wall_ms() + static_cast<int64_t>(rng() % 2'000), options_.last_due_ms);
    return job;
  };
  const char kPolicies[] = {'f', 'i', 'c'};
  const auto policy_of = [](char p) {
    return p == 'f' ? ChildFailure::fail_parent : p == 'i' ? ChildFailure::ignore : ChildFailure::proceed;
  };
  for (int64_t n = 0; producing_; ++n) {
    std::vector<std::vector<std::string>> lines;  // groups.tsv, without the answer
    if (n % 2 == 0) {
      const std::string group = fmt::format("F{}.", n);
      FlowJob root{JobSpec{queue, "noop", "", group + "r", 0, 3}};
      if (rng() % 3 == 0) root.job.due_ms = std::min(wall_ms() + static_cast<int64_t>(rng() % 3'000), options_.last_due_ms);
      lines.push_back({root.job.id, "f" + root.job.id, "", "-", root.job.type, "j"});
      const int children = 2 + static_cast<int>(rng() % 2);
      for (int c = 0; c < children; ++c) {
        const char p = kPolicies[rng() % 3];
        FlowJob child{draw(fmt::format("{}c{}", group, c)), policy_of(p)};
        if (c == 0 && rng() % 2 == 0) {
          // A child with children of its own: a noop (it runs after them).
          child.job = JobSpec{queue, "noop", "", child.job.id, 0, 3};
          for (int g = 0; g < 2; ++g) {
            const char gp = kPolicies[rng() % 3];
            FlowJob grandchild{draw(fmt::format("{}c0g{}", group, g)), policy_of(gp)};
            lines.push_back({grandchild.job.id, "f" + child.job.id, child.job.id, std::string(1, gp), grandchild.job.type, "j"});
            child.children.push_back(std::move(grandchild));
          }
        }
        lines.push_back({child.job.id, "f" + root.job.id, root.job.id, std::string(1, p), child.job.type, "j"});
        root.children.push_back(std::move(child));
      }
      const auto stored = ask_group([&] { return client.enqueue_flow(queue, root); });
      if (!stored) continue;
      for (auto& line : lines) {
        line.push_back(*stored ? "accepted" : "unknown");
        append_line(dir_ / "groups.tsv", line);
      }
    } else {
      const std::string batch = fmt::format("B{}.", n), group = "b" + batch;
      BatchCallbacks callbacks{JobSpec{queue, "noop", "", batch + "s", 0, 3}, JobSpec{queue, "noop", "", batch + "c", 0, 3}};
      std::vector<JobSpec> first = {draw(batch + "m0"), draw(batch + "m1")};
      std::vector<JobSpec> second = {draw(batch + "m2"), draw(batch + "m3")};
      const auto opened = ask_group([&] { return client.open_batch(queue, batch, callbacks, first); });
      if (!opened) continue;
      const auto closed = ask_group([&] { return client.add_to_batch(queue, batch, second, true); });
      const std::string open_answer = *opened ? "accepted" : "unknown";
      const std::string close_answer = closed && *closed && *opened ? "accepted" : "unknown";
      append_line(dir_ / "groups.tsv", {batch + "s", group, "", "-", "noop", "s", close_answer});
      append_line(dir_ / "groups.tsv", {batch + "c", group, "", "-", "noop", "c", close_answer});
      for (const auto& job : first) append_line(dir_ / "groups.tsv", {job.id, group, "", "-", job.type, "j", open_answer});
      if (closed && !*closed) {
        std::lock_guard lock(mutex_);
        unclosed_.push_back(batch);
      }
      if (closed)
        for (const auto& job : second) append_line(dir_ / "groups.tsv", {job.id, group, "", "-", job.type, "j", close_answer});
    }
    std::this_thread::sleep_for(400ms);
  }
}

void Workload::close_batches_left_open() {
  std::vector<std::string> batches;
  {
    std::lock_guard lock(mutex_);
    batches.swap(unclosed_);
  }
  Client client(options_.endpoints, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  for (const auto& batch : batches) {
    const int64_t give_up_at = steady_ms() + 30'000;
    for (bool first = true; first || steady_ms() < give_up_at; first = false) {
      if (!first) std::this_thread::sleep_for(200ms);
      auto r = client.close_batch(options_.flow_queue, batch);
      if (r && r->status != GroupResult::Status::overloaded) break;
    }
  }
}

void Workload::produce_ordered() {
  std::mt19937_64 rng(options_.seed * 7919 + 15'485'863);
  Client client(options_.endpoints, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  for (int64_t n = 0; producing_; ++n) {
    std::vector<JobSpec> batch;
    for (int i = 0; i < 3; ++i) {
      JobSpec job{options_.ordered_queue, "sleep", std::to_string(kOrderedRunMs), fmt::format("o{}.", n * 3 + i), 0, 3};
      job.key = fmt::format("acct-{}", rng() % 6);
      if (rng() % 2 == 0) job.due_ms = std::min(wall_ms() + static_cast<int64_t>(rng() % 3'000), options_.last_due_ms);
      append_line(dir_ / "keys.tsv", {job.id, job.key});
      batch.push_back(std::move(job));
    }
    send(client, std::move(batch));
    std::this_thread::sleep_for(150ms);
  }
}

// Half of the fair queue's jobs are of one key, the rest of five light
// ones; some due now (tagged by the enqueue), some later (by a promote).
void Workload::produce_fair() {
  std::mt19937_64 rng(options_.seed * 7919 + 32'452'843);
  Client client(options_.endpoints, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  for (int64_t n = 0; producing_; ++n) {
    std::vector<JobSpec> batch;
    for (int i = 0; i < 4; ++i) {
      JobSpec job{options_.fair_queue, "sleep", "10", fmt::format("f{}.", n * 4 + i), 0, 3};
      job.key = i < 2 ? std::string("busy") : fmt::format("light-{}", rng() % 5);
      if (rng() % 2 == 0) job.due_ms = std::min(wall_ms() + static_cast<int64_t>(rng() % 3'000), options_.last_due_ms);
      batch.push_back(std::move(job));
    }
    send(client, std::move(batch));
    std::this_thread::sleep_for(150ms);
  }
}

void Workload::produce_new_queue(size_t q) {
  const auto& [at_ms, name, asked_once] = options_.new_queues[q];
  std::mt19937_64 rng(options_.seed * 7919 + 104'729 + q);
  Client client(options_.endpoints, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  // A client begins with its first endpoint: one that asks once must be
  // with the leader by then (a standby answers not_leader, and the client
  // moves to the broker it names).
  while (producing_ && wall_ms() < at_ms - 1'000) std::this_thread::sleep_for(10ms);
  if (asked_once) (void)client.broker_stats();
  while (producing_ && wall_ms() < at_ms) std::this_thread::sleep_for(10ms);
  if (!producing_) return;
  std::vector<JobSpec> batch;
  // QUEUE:N. (the dot ends an id, reschedule_one): a schedule may hold a
  // broker's bytes from the first that carry "QUEUE:".
  for (int i = 0; i < options_.batch; ++i) batch.push_back(draw_job(rng, options_, name, fmt::format("{}:{}.", name, i)));
  send(client, std::move(batch), asked_once ? 0 : kAskAgainMs);
}

void Workload::send(Client& client, std::vector<JobSpec> batch, int64_t ask_again_ms) {
  const int64_t give_up_at = steady_ms() + ask_again_ms;
  for (bool first = true; !batch.empty() && (first || steady_ms() < give_up_at); first = false) {
    if (!first)
      for (const auto& job : batch) append_line(dir_ / "asks.tsv", {job.id, std::to_string(wall_ms())});
    auto results = client.enqueue_batch(batch);
    std::vector<JobSpec> again;
    for (size_t i = 0; results && i < results->size(); ++i) {
      const auto& r = (*results)[i];
      if (r.status == EnqueueResult::Status::accepted || r.status == EnqueueResult::Status::duplicate) {
        record(batch[i], true);
      } else if (r.status == EnqueueResult::Status::rejected) {
        ++rejected_;  // every job here is valid
        fmt::print("REJECTED {}: {}\n", r.id, r.reason);
      } else {
        again.push_back(batch[i]);  // overloaded, unavailable: asked again
      }
    }
    if (results) batch = std::move(again);
    if (!batch.empty()) std::this_thread::sleep_for(200ms);
  }
  for (const auto& job : batch) record(job, false);
}

void Workload::operate() {
  std::mt19937_64 rng(options_.seed * 31 + 7);
  // The operator's requests go as `dueq --timeout 5s` sends them (its
  // retries included), from this process: a sanitized dueq took 72 ms of
  // CPU just to start (`dueq --help`), and in a profile of the whole suite
  // the dueq processes took 7.2 % of its CPU, the nemesis runs' among them.
  Client admin(options_.endpoints, ClientOptions{.timeout_ms = 5000, .attempts = 3});
  while (producing_) {
    if (rng() % 40 == 0) cancel_one(admin, rng);
    if (rng() % 40 == 0) reschedule_one(admin, rng);
    if (rng() % 40 == 0) edit_one(admin, rng);
    if (rng() % 3 == 0) delete_transient_queue(admin);
    if (rng() % 20 == 0) search_one(admin, rng);
    if (rng() % 20 == 0) sample_progress(admin);
    std::this_thread::sleep_for(100ms);
  }
}

namespace {

// `text` with tabs and line breaks made spaces: a history line holds it.
std::string one_line(std::string text) {
  std::replace_if(text.begin(), text.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, ' ');
  return text;
}

// Rows of an admin answer, one per line, as `key=value` pairs.
std::string rows_text(const AdminResult& result) {
  std::string out = "summary: " + result.summary + "\n";
  for (const auto& row : result.rows) {
    for (const auto& [key, value] : row) out.append(key).append("=").append(value).append(" ");
    out += "\n";
  }
  return out;
}

}  // namespace

void Workload::search_one(Client& admin, std::mt19937_64& rng) {
  auto job = waiting_job(rng, 3'000, false);
  if (!job) return;
  const int64_t at_ms = wall_ms();
  const auto run = admin.admin(AdminCommand{"search", job->queue, {}, 0, 0,
                                            {{"states", "scheduled"}, {"type", job->type}, {"id_prefix", job->id}}});
  if (!run) return;  // unanswered (a fault): nothing learned
  const bool found = std::any_of(run->rows.begin(), run->rows.end(), [&](const auto& row) {
    const auto id = row.find("id");
    return id != row.end() && id->second == job->id;
  });
  if (found) {
    append_line(dir_ / "searches.tsv", {job->id, std::to_string(at_ms), "found"});
    return;
  }
  // A miss is a violation unless a fault excuses it: what the search said
  // and where a lookup finds the job right after go with it, to tell a
  // search that passed over a scheduled job from one that was right.
  const int64_t answered_ms = wall_ms();
  const auto lookup = admin.job_document(job->id, job->queue);
  // The audit names partitions the schedule's index or its type index
  // misses (search-misses.txt, kept with the run's history).
  const auto audit = admin.admin(AdminCommand{"audit", job->queue, {}, 0, 0});
  std::string state_after = "(lookup failed)";
  if (lookup) state_after = *lookup ? (*lookup)->state : "(no such job)";
  {
    std::ofstream out(dir_ / "search-misses.txt", std::ios::app);
    out << "search for " << job->id << " at wall ms " << at_ms << ":\n" << rows_text(*run) << "lookup: " << state_after
        << "\naudit:\n" << (audit ? rows_text(*audit) : "(failed: " + audit.error().message + ")\n") << "\n";
  }
  append_line(dir_ / "searches.tsv", {job->id, std::to_string(at_ms), "missing", std::to_string(answered_ms),
                                      one_line(run->summary), one_line(state_after)});
}

void Workload::delete_transient_queue(Client& admin) {
  const int64_t from_ms = wall_ms();
  if (admin.admin(AdminCommand{"queue_delete", transient_queue(), {}, 0, 0})) append_line(dir_ / "deletes.tsv", {transient_queue(), std::to_string(from_ms), std::to_string(wall_ms())});
}

void Workload::produce_transient() {
  std::mt19937_64 rng(options_.seed * 7919 + 15'485'863);
  Client client(options_.endpoints, ClientOptions{.timeout_ms = 2000, .attempts = 1});
  for (int64_t n = 0; producing_; ++n) {
    const int64_t due = rng() % 2 == 0 ? 0 : std::min(wall_ms() + static_cast<int64_t>(rng() % 1500), options_.last_due_ms);
    send(client, {JobSpec{transient_queue(), "noop", "", fmt::format("t-{}", n), due, 3}});
    std::this_thread::sleep_for(400ms);
  }
}

std::optional<Workload::Cancellable> Workload::waiting_job(std::mt19937_64& rng, int64_t ahead_ms, bool take) {
  std::lock_guard lock(mutex_);
  const int64_t soon = wall_ms() + ahead_ms;
  std::erase_if(cancellable_, [&](const auto& c) { return c.due_ms < soon; });
  if (cancellable_.empty()) return std::nullopt;
  const size_t at = rng() % cancellable_.size();
  Cancellable job = cancellable_[at];
  if (take) cancellable_.erase(cancellable_.begin() + static_cast<std::ptrdiff_t>(at));
  return job;
}

void Workload::cancel_one(Client& admin, std::mt19937_64& rng) {
  auto job = waiting_job(rng, 1'000);
  if (!job) return;
  append_line(dir_ / "cancels.tsv", {job->id});
  (void)admin.admin(AdminCommand{"cancel", job->queue, {job->id}, 0, 0});
}

// The progress `dueq workers` shows beside each job a worker holds (the
// text of its "jobs" field): the sleep handler's text names its own job's
// id (progress.tsv).
void Workload::sample_progress(Client& admin) {
  const auto listed = admin.admin(AdminCommand{"workers", "", {}, 0, 0});
  if (!listed) return;  // unanswered (a fault) or a listing too soon after another
  static const std::regex kShown(R"(([^\s/,]+)/(\S+) (?:running|held) -?\d+ ms \((\d+)% (\S+) slept)");
  for (const auto& row : listed->rows) {
    const auto jobs = row.find("jobs");
    if (jobs == row.end()) continue;
    for (std::sregex_iterator it(jobs->second.begin(), jobs->second.end(), kShown), end; it != end; ++it)
      append_line(dir_ / "progress.tsv", {(*it)[2].str(), (*it)[4].str(), (*it)[3].str()});
  }
}

// A job due 3 s or more from now moved up to 2 s earlier or later (never
// before 1.5 s from now, nor after the last due time): by id, or through a
// bulk action whose filter selects it alone.
void Workload::reschedule_one(Client& admin, std::mt19937_64& rng) {
  auto job = waiting_job(rng, 3'000);
  if (!job) return;
  const int64_t moved = job->due_ms + static_cast<int64_t>(rng() % 4'001) - 2'000;
  const int64_t due = std::min(std::max(moved, wall_ms() + 1'500), options_.last_due_ms);
  append_line(dir_ / "reschedules.tsv", {job->id, std::to_string(due)});
  if (rng() % 2 == 0) {
    (void)admin.reschedule(job->id, due, job->queue);
    return;
  }
  // Started, not followed to its end as `dueq bulk run` does: the broker
  // goes on with it whatever the asker does.
  (void)admin.admin(AdminCommand{"bulk", job->queue, {}, 0, 0,
                                 {{"action", "reschedule"}, {"state", "scheduled"}, {"id_prefix", job->id}, {"at_ms", std::to_string(due)}}});
}

// The payload of a sleep job due 3 s or more from now (not a unique one: a
// debounce would replace its record) becomes kEditedPayload, at the version
// read just before (as `dueq job edit` without --version); edits.tsv names
// it once the broker answered that the edit landed.
void Workload::edit_one(Client& admin, std::mt19937_64& rng) {
  auto job = waiting_job(rng, 3'000);
  if (!job || job->type != "sleep" || job->id.starts_with("u")) return;
  const auto read = admin.job_document(job->id, job->queue);
  if (!read || !*read) return;
  if (admin.edit_payload(job->id, kEditedPayload, (*read)->version, job->queue)) append_line(dir_ / "edits.tsv", {job->id, kEditedPayload});
}

}  // namespace dueq::nemesis
