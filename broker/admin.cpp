#include "broker/admin.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include "broker/auditor.hpp"
#include "broker/job_record.hpp"
#include "broker/keys.hpp"

namespace dueq::broker {

namespace {
constexpr int kBulkStep = 1000;        // jobs per replay/purge call
constexpr int64_t kDeadListMax = 10'000;
}  // namespace

namespace calls {

Command cancel(const std::string& queue, int64_t now_ms, const std::string& id, int64_t retention_s) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::cancel, {k.schedule, k.ready, k.leased, k.dead, k.done, k.cancelled, k.stats, k.jobs,
                                             k.tokens, k.attempts, k.errors, k.error_logs, k.cancel_requested, k.unconfirmed})
      .add(now_ms)
      .add(id)
      .add(retention_s)
      .add(static_cast<int64_t>(schedule_partition(id)));
}

Result<CancelOutcome> parse_cancel(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return reply::bad(r, "cancel");
  const int status = static_cast<int>(reply::num(r->element[0]));
  if (status != 2) return CancelOutcome{status, 0};
  auto token = token_from_text(reply::str(r->element[1]));
  if (!token) return reply::bad(r, "cancel");
  return CancelOutcome{status, *token};
}

namespace {
Command replay_call(const std::string& queue) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::replay, {k.dead, k.ready, k.stats, k.jobs, k.attempts, k.cancel_requested, k.unconfirmed});
}
Command purge_call(const std::string& queue) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::purge, {k.dead, k.stats, k.jobs, k.tokens, k.attempts, k.errors, k.error_logs, k.unconfirmed});
}
}  // namespace

Command replay(const std::string& queue, int64_t now_ms, const std::vector<std::string>& ids) {
  Command call = replay_call(queue).add(now_ms).add(static_cast<int64_t>(ids.size()));
  for (const auto& id : ids) call.add(id);
  return call;
}

Command replay_oldest(const std::string& queue, int64_t now_ms, int limit) {
  return replay_call(queue).add(now_ms).add(int64_t{0}).add(limit);
}

Command purge(const std::string& queue, const std::vector<std::string>& ids) {
  Command call = purge_call(queue).add(static_cast<int64_t>(ids.size()));
  for (const auto& id : ids) call.add(id);
  return call;
}

Command purge_dead_before(const std::string& queue, int64_t cutoff_ms, int limit) {
  return purge_call(queue).add(int64_t{0}).add(cutoff_ms).add(limit);
}

Command show(const std::string& queue, const std::string& id) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::show, {k.schedule, k.ready, k.leased, k.dead, k.done, k.cancelled, k.jobs,
                                           k.attempts, k.errors, k.error_logs, k.cancel_requested})
      .add(id)
      .add(static_cast<int64_t>(schedule_partition(id)));
}

Result<std::map<std::string, std::string>> parse_show(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 7) return reply::bad(r, "show");
  using reply::str;
  std::map<std::string, std::string> out;
  const std::string state = str(r->element[0]);
  if (state.empty()) return out;
  out["s"] = state;
  if (state == "dead" || state == "done" || state == "cancelled") out["f"] = str(r->element[1]);
  if (const std::string bytes = str(r->element[2]); !bytes.empty()) {
    auto record = decode_job_record(bytes);
    // Shown for what it is: the lookup of a job whose record was damaged
    // must still work.
    if (!record) {
      out["t"] = "(unreadable record: " + record.error().message + ")";
    } else {
      out["t"] = record->type;
      out["p"] = record->payload;
      out["d"] = std::to_string(record->due_ms);
      out["m"] = std::to_string(record->max_attempts);
      out["c"] = std::to_string(record->created_ms);
      if (record->backoff_base_ms != 0) out["bb"] = std::to_string(record->backoff_base_ms);
      if (record->backoff_cap_ms != 0) out["bc"] = std::to_string(record->backoff_cap_ms);
    }
  }
  // A finished job's attempts were deleted with it: not known, not 0.
  std::string attempts = str(r->element[3]);
  if (attempts.empty()) attempts = "0";
  if (out.contains("t") || attempts != "0") out["a"] = std::move(attempts);
  if (auto e = str(r->element[4]); !e.empty()) out["e"] = e;
  if (auto el = str(r->element[5]); !el.empty()) out["el"] = el;
  if (str(r->element[6]) == "1") out["cx"] = "1";
  return out;
}

}  // namespace calls

Result<std::vector<std::string>> known_queues(ScriptRegistry& redis) {
  auto r = redis.call(Command{"SMEMBERS", kQueuesKey});
  if (!r) return std::unexpected(r.error());
  auto names = reply::strings(r->get(), "SMEMBERS");
  if (names) std::sort(names->begin(), names->end());
  return names;
}

Result<std::map<std::string, std::string>> job_fields(ScriptRegistry& redis, const std::string& queue,
                                                      const std::string& id) {
  auto r = redis.call(calls::show(queue, id));
  if (!r) return std::unexpected(r.error());
  return calls::parse_show(r->get());
}

Admin::Admin(const BrokerConfig& config, const Clock& clock, RedisAddress address, std::shared_ptr<RedisBudget> budget)
    : config_(config), clock_(clock), redis_(std::move(address)), ready_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  redis_.set_budget(std::move(budget));
  redis_.set_stop_flag(&stopping_);
}

void Admin::start() {
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void Admin::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Admin::submit(const Peer& peer, proto::JobRequest&& request) {
  const uint64_t id = request.request_id;
  submit(peer, id, Request(std::move(request)));
}

void Admin::submit(const Peer& peer, proto::AdminRequest&& request) {
  const uint64_t id = request.request_id;
  submit(peer, id, Request(std::move(request)));
}

void Admin::submit(const Peer& peer, uint64_t request_id, Request&& request) {
  // A client resends a request it has no answer to yet: the one in progress
  // answers both.
  if (!in_progress_.emplace(peer.routing_id, request_id).second) return;
  size_t& waiting = waiting_by_requester_[requester(peer)];
  ++waiting;  // until deliver() sends its answer, whatever it is
  {
    std::lock_guard lock(mutex_);
    if (waiting <= kMaxQueuedPerRequester && requests_.size() < kMaxQueued) {
      requests_.emplace_back(peer, std::move(request));
      wake_.notify_one();
      return;
    }
    const std::string why = waiting > kMaxQueuedPerRequester
                                ? fmt::format("{} has {} admin requests waiting", peer.key_name.empty() ? "this connection" : "this key",
                                              kMaxQueuedPerRequester)
                                : fmt::format("{} admin requests are waiting", kMaxQueued);
    answers_.push_back(Answer{peer, request_id, proto::ErrorFrame{request_id, "overloaded", why + "; retry later", 1000}, {}, {}});
  }
  signal_ready();
}

void Admin::signal_ready() {
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(ready_fd_.get(), &one, sizeof one);
}

void Admin::deliver(Outbox& outbox, InflightTable& inflight, QueueTable& queues) {
  uint64_t count = 0;
  [[maybe_unused]] auto n = ::read(ready_fd_.get(), &count, sizeof count);
  std::vector<Answer> answers;
  {
    std::lock_guard lock(mutex_);
    answers.swap(answers_);
  }
  for (auto& answer : answers) {
    in_progress_.erase({answer.peer.routing_id, answer.request_id});
    if (auto it = waiting_by_requester_.find(requester(answer.peer)); it != waiting_by_requester_.end() && --it->second == 0)
      waiting_by_requester_.erase(it);
    for (const auto& ref : answer.stop_running) {
      const InflightJob* job = inflight.find(ref.queue, ref.id);
      if (job != nullptr && job->token == ref.token && !job->worker.empty())
        outbox.send(Peer{job->worker, false}, proto::Cancel{{ref}});
    }
    for (const auto& name : answer.ready_queues) queues.get(name).maybe_ready = true;
    std::visit([&](const auto& frame) { outbox.send(answer.peer, frame); }, answer.frame);
  }
}

void Admin::run() {
  while (true) {
    std::pair<Peer, Request> next;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !requests_.empty(); });
      if (stopping_) return;
      next = std::move(requests_.front());
      requests_.pop_front();
    }
    Answer answer = handle(next.first, next.second);
    {
      std::lock_guard lock(mutex_);
      answers_.push_back(std::move(answer));
    }
    signal_ready();
  }
}

Admin::Answer Admin::handle(const Peer& peer, const Request& request) {
  Answer answer;
  answer.peer = peer;
  answer.request_id = std::visit([](const auto& r) { return r.request_id; }, request);
  auto unavailable = [&](const Error& error) {
    const bool down = error.code == Errc::unavailable;
    if (down) redis_.disconnect();
    answer.frame = proto::ErrorFrame{answer.request_id, errc_name(error.code), error.message, down ? 1000u : 0u};
  };
  if (!redis_.connected())
    if (auto ok = redis_.connect(); !ok) {
      unavailable(Error{Errc::unavailable, "Redis is unavailable: " + ok.error().message});
      return answer;
    }
  if (const auto* job = std::get_if<proto::JobRequest>(&request)) {
    auto reply = lookup(*job);
    // The connection kept since the last request finds out only now that
    // Redis restarted meanwhile: a lookup reads only, so it is tried again
    // once on a new connection instead of failing the first user after a
    // restart.
    if (!reply && reply.error().code == Errc::unavailable) {
      redis_.disconnect();
      if (redis_.connect()) reply = lookup(*job);
    }
    if (reply) answer.frame = std::move(*reply);
    else unavailable(reply.error());
  } else {
    const auto& admin = std::get<proto::AdminRequest>(request);
    if (auto reply = operate(admin, answer)) {
      reply->request_id = admin.request_id;
      answer.frame = std::move(*reply);
    } else {
      unavailable(reply.error());
    }
  }
  return answer;
}

Result<std::vector<std::string>> Admin::queues_for(const std::string& queue) {
  if (!queue.empty()) return std::vector<std::string>{queue};
  return known_queues(redis_);
}

Result<std::string> Admin::find_job_queue(const std::string& id, const std::string& queue) {
  auto names = queues_for(queue);
  if (!names) return std::unexpected(names.error());
  // Ids are unique within a queue only: an id held by two queues is not
  // guessed at.
  std::vector<std::string> holders;
  for (const auto& name : *names) {
    auto fields = job_fields(redis_, name, id);
    if (!fields) return std::unexpected(fields.error());
    if (!fields->empty()) holders.push_back(name);
  }
  if (holders.empty()) return fail(Errc::not_found, "no job " + id);
  if (holders.size() > 1)
    return fail(Errc::bad_argument, fmt::format("job {} is in queues {}: name one (--queue)", id, fmt::join(holders, ", ")));
  return holders.front();
}

Result<proto::JobReply> Admin::lookup(const proto::JobRequest& request) {
  proto::JobReply reply{request.request_id, false, {}};
  auto names = queues_for(request.queue);
  if (!names) return std::unexpected(names.error());
  std::vector<std::string> others;  // further queues holding a job with this id
  for (const auto& name : *names) {
    auto fields = job_fields(redis_, name, request.id);
    if (!fields) return std::unexpected(fields.error());
    if (fields->empty()) continue;
    if (reply.found) {
      others.push_back(name);
      continue;
    }
    reply.found = true;
    reply.fields = std::move(*fields);
    reply.fields["queue"] = name;
    reply.fields["id"] = request.id;
  }
  if (!others.empty()) reply.fields["also_in"] = fmt::format("{}", fmt::join(others, ","));
  return reply;
}

Result<proto::AdminReply> Admin::operate(const proto::AdminRequest& request, Answer& answer) {
  proto::AdminReply reply;
  const std::string& op = request.op;
  const int64_t now = clock_.wall_ms();
  auto run = [&](Command call) -> Result<ReplyPtr> {
    auto r = redis_.call(std::move(call));
    if (!r) return r;
    if (auto err = reply_error(r->get()); !err.empty()) return fail(Errc::internal, std::string(err));
    return r;
  };

  if (op == "cancel") {
    // Every id is looked up before any is cancelled: an ambiguous one fails
    // the request and changes nothing.
    std::vector<std::optional<std::string>> queue_of;
    for (const auto& id : request.ids) {
      auto queue_name = find_job_queue(id, request.queue);
      if (!queue_name && queue_name.error().code != Errc::not_found) return std::unexpected(queue_name.error());
      queue_of.push_back(queue_name ? std::optional(*queue_name) : std::nullopt);
    }
    for (size_t i = 0; i < request.ids.size(); ++i) {
      const std::string& id = request.ids[i];
      std::map<std::string, std::string> row{{"id", id}};
      const auto& queue_name = queue_of[i];
      if (!queue_name) {
        row["result"] = "not found";
        reply.rows.push_back(std::move(row));
        continue;
      }
      row["queue"] = *queue_name;
      auto r = run(calls::cancel(*queue_name, now, id, config_.policy(*queue_name).done_retention_s));
      if (!r) return std::unexpected(r.error());
      auto outcome = calls::parse_cancel(r->get());
      if (!outcome) return std::unexpected(outcome.error());
      switch (outcome->status) {
        case 1: row["result"] = "cancelled"; break;
        case 2:
          row["result"] = "cancelling: it is running; its worker was told to stop";
          answer.stop_running.push_back({*queue_name, id, outcome->token});
          break;
        case -1: row["result"] = "already finished"; break;
        default: row["result"] = "not found";
      }
      reply.rows.push_back(std::move(row));
    }
    return reply;
  }

  if (op == "dead_list") {
    const int64_t limit = request.limit == 0 ? 1000 : std::min<int64_t>(request.limit, kDeadListMax);
    auto names = queues_for(request.queue);
    if (!names) return std::unexpected(names.error());
    for (const auto& name : *names) {
      auto r = redis_.call(Command{"ZRANGE", QueueKeys(name).dead, "0", std::to_string(limit - 1)});
      if (!r) return std::unexpected(r.error());
      auto ids = reply::strings(r->get(), "ZRANGE");
      if (!ids) return std::unexpected(ids.error());
      // Bounded steps: 100 lookups per round trip.
      for (size_t i = 0; i < ids->size(); i += 100) {
        std::vector<Command> shows;
        for (size_t j = i; j < std::min(ids->size(), i + 100); ++j) shows.push_back(calls::show(name, (*ids)[j]));
        auto replies = redis_.pipeline(std::move(shows));
        if (!replies) return std::unexpected(replies.error());
        for (size_t j = 0; j < replies->size(); ++j) {
          auto row = calls::parse_show((*replies)[j].get());
          if (!row) return std::unexpected(row.error());
          if (row->empty()) continue;  // purged or replayed since the range was read
          (*row)["id"] = (*ids)[i + j];
          (*row)["queue"] = name;
          (*row)["died_ms"] = (*row)["f"];
          reply.rows.push_back(std::move(*row));
        }
      }
    }
    return reply;
  }

  if (op == "replay" || op == "purge") {
    const bool replay = op == "replay";
    size_t changed = 0;
    auto apply = [&](Command call, const std::string& name) -> Result<size_t> {
      auto r = run(std::move(call));
      if (!r) return std::unexpected(r.error());
      auto ids = reply::strings(r->get(), op);
      if (!ids) return std::unexpected(ids.error());
      for (const auto& id : *ids) reply.rows.push_back({{"id", id}, {"queue", name}});
      changed += ids->size();
      if (replay && !ids->empty()) answer.ready_queues.push_back(name);
      return ids->size();
    };
    if (request.ids.empty()) {
      if (replay && request.queue.empty()) return fail(Errc::bad_argument, "replaying every dead job needs a queue");
      if (!replay && request.older_than_ms <= 0) return fail(Errc::bad_argument, "purge needs ids or an age");
      auto names = queues_for(request.queue);
      if (!names) return std::unexpected(names.error());
      for (const auto& name : *names) {
        while (true) {
          auto n = apply(replay ? calls::replay_oldest(name, now, kBulkStep)
                                : calls::purge_dead_before(name, now - request.older_than_ms, kBulkStep),
                         name);
          if (!n) return std::unexpected(n.error());
          if (*n < static_cast<size_t>(kBulkStep)) break;
        }
      }
    } else {
      std::map<std::string, std::vector<std::string>> by_queue;
      for (const auto& id : request.ids) {
        auto name = find_job_queue(id, request.queue);
        if (name) by_queue[*name].push_back(id);
        else if (name.error().code != Errc::not_found) return std::unexpected(name.error());
      }
      for (const auto& [name, ids] : by_queue)
        if (auto n = apply(replay ? calls::replay(name, now, ids) : calls::purge(name, ids), name); !n)
          return std::unexpected(n.error());
    }
    reply.summary = fmt::format("{} {}", changed, replay ? "replayed" : "purged");
    return reply;
  }

  if (op != "audit") return fail(Errc::bad_argument, "unknown admin operation " + op);
  size_t violations = 0;
  auto names = queues_for(request.queue);
  if (!names) return std::unexpected(names.error());
  for (const auto& name : *names) {
    auto report = audit_queue(redis_, name, /*repair=*/false);
    if (!report) return std::unexpected(report.error());
    const auto& c = report->counts;
    reply.rows.push_back({{"queue", name}, {"accepted", std::to_string(c.accepted)}, {"done", std::to_string(c.done)},
                          {"cancelled", std::to_string(c.cancelled)}, {"purged", std::to_string(c.purged)},
                          {"dead", std::to_string(c.dead)}, {"scheduled", std::to_string(c.scheduled)},
                          {"ready", std::to_string(c.ready)}, {"leased", std::to_string(c.leased)},
                          {"imbalance", std::to_string(c.imbalance())}});
    if (c.imbalance() != 0) ++violations;
    for (const auto& [id, what] : report->problems) {
      reply.rows.push_back({{"queue", name}, {"id", id}, {"problem", what}});
      ++violations;
    }
  }
  reply.summary = violations == 0 ? "clean" : fmt::format("{} violations", violations);
  return reply;
}

}  // namespace dueq::broker
