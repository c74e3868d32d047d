#include "cli/enqueue_command.hpp"

#include <cstdlib>
#include <algorithm>
#include <deque>
#include <fstream>
#include <future>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/output.hpp"
#include "common/clock.hpp"
#include "common/duration.hpp"
#include "common/ids.hpp"
#include "common/json_bytes.hpp"
#include "common/logging.hpp"
#include "common/names.hpp"
#include "common/protocol.hpp"

namespace dueq::cli {

namespace {

// What the broker would refuse in a job, said before any network call.
std::optional<std::string> job_problem(const JobSpec& job) {
  if (auto ok = validate_queue_name(job.queue); !ok) return ok.error().message;
  if (auto ok = validate_job_type(job.type); !ok) return ok.error().message;
  if (!job.id.empty())
    if (auto ok = validate_job_id(job.id); !ok) return ok.error().message;
  if (job.payload.size() > proto::kMaxPayloadBytes)
    return fmt::format("payload of {} bytes; at most {}", job.payload.size(), proto::kMaxPayloadBytes);
  if (job.key.size() > proto::kMaxKeyBytes)
    return fmt::format("key of {} bytes; at most {}", job.key.size(), proto::kMaxKeyBytes);
  if (job.start_by_ms != 0 && (job.start_by_ms <= wall_ms() || job.start_by_ms < job.due_ms))
    return "the start-by deadline (--start-by, --start-within, start_by_ms) must be after now and not before the due time";
  if (auto ok = validate_trace_context(job.traceparent, job.tracestate); !ok) return ok.error().message;
  if (job.unique_until == UniqueUntil::none) return std::nullopt;
  if (job.unique_key.empty() || job.unique_key.size() > proto::kMaxKeyBytes)
    return fmt::format("unique key of {} bytes; 1 to {}", job.unique_key.size(), proto::kMaxKeyBytes);
  if ((job.unique_until == UniqueUntil::period || job.unique_until == UniqueUntil::debounce) != (job.unique_for_ms > 0))
    return "a unique period (--unique-for, unique_for_ms) goes with unique_until period or debounce, and only with them";
  return std::nullopt;
}

// "waiting", "started", "done" or "period".
std::optional<UniqueUntil> unique_until_named(const std::string& name) {
  if (name == "waiting") return UniqueUntil::waiting;
  if (name == "started") return UniqueUntil::started;
  if (name == "done") return UniqueUntil::done;
  if (name == "period") return UniqueUntil::period;
  if (name == "debounce") return UniqueUntil::debounce;
  return std::nullopt;
}

// The unique fields from their flags or JSON fields: a key alone holds it
// until done, a period alone is "period".
std::expected<void, std::string> set_unique(JobSpec& job, std::string key, const std::string& until, int64_t for_ms) {
  if (key.empty()) {
    if (!until.empty() || for_ms != 0) return std::unexpected("unique_until and unique_for need a unique key");
    return {};
  }
  job.unique_key = std::move(key);
  job.unique_for_ms = for_ms;
  if (until.empty()) {
    job.unique_until = for_ms > 0 ? UniqueUntil::period : UniqueUntil::done;
  } else if (auto named = unique_until_named(until)) {
    job.unique_until = *named;
  } else {
    return std::unexpected("unique_until: waiting, started, done, period or debounce, not '" + until + "'");
  }
  return {};
}

void print_outcome(const std::string& id, const char* status, bool json) {
  if (json) fmt::print("{}\n", nlohmann::json{{"id", id}, {"status", status}}.dump());
  else fmt::print("{}\n", id);
}

}  // namespace

std::expected<JobSpec, std::string> job_from_args(const EnqueueArgs& a) {
  JobSpec job{a.queue, a.type, a.payload, a.id, 0, a.max_attempts, 0, 0, a.key};
  for (auto [text, target, flag] : {std::tuple{&a.backoff_base, &job.backoff_base_ms, "--backoff-base"},
                                     std::tuple{&a.backoff_cap, &job.backoff_cap_ms, "--backoff-cap"}}) {
    if (text->empty()) continue;
    auto ms = parse_duration_ms(*text);
    if (!ms) return std::unexpected(fmt::format("{}: {}", flag, ms.error().message));
    *target = *ms;
  }
  if (!a.payload_file.empty()) {
    std::ifstream in(a.payload_file, std::ios::binary);
    if (a.payload_file != "-" && !in) return std::unexpected("cannot read --payload-file " + a.payload_file);
    std::ostringstream buffer;
    buffer << (a.payload_file == "-" ? std::cin.rdbuf() : in.rdbuf());
    job.payload = buffer.str();
  }
  if (!a.delay.empty()) {
    auto ms = parse_duration_ms(a.delay);
    if (!ms) return std::unexpected("--delay: " + ms.error().message);
    job.due_ms = Client::in_ms(*ms);
  } else if (!a.at.empty()) {
    auto ms = parse_rfc3339_ms(a.at);
    if (!ms) return std::unexpected("--at: " + ms.error().message);
    job.due_ms = *ms;
  } else if (a.at_ms >= 0) {
    job.due_ms = a.at_ms;
  }
  int64_t unique_for_ms = 0;
  if (!a.unique_for.empty()) {
    auto ms = parse_duration_ms(a.unique_for);
    if (!ms || *ms <= 0) return std::unexpected("--unique-for: a duration of 1 ms or more, e.g. 1m");
    unique_for_ms = *ms;
  }
  if (auto ok = set_unique(job, a.unique_key, a.unique_until, unique_for_ms); !ok) return std::unexpected("--" + ok.error());
  if (!a.start_by.empty()) {
    auto ms = time_ms(a.start_by);
    if (!ms) return std::unexpected("--start-by: " + ms.error());
    job.start_by_ms = *ms;
  } else if (!a.start_within.empty()) {
    auto ms = parse_duration_ms(a.start_within);
    if (!ms || *ms <= 0) return std::unexpected("--start-within: a duration of 1 ms or more, e.g. 10m");
    job.start_by_ms = std::max(job.due_ms, wall_ms()) + *ms;
  }
  // A command run inside a traced process (an exec handler gets both
  // variables) carries its caller's context unless told otherwise.
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing in dueq changes its environment
  const char* env_parent = std::getenv("TRACEPARENT");
  const char* env_state = std::getenv("TRACESTATE");  // NOLINT(concurrency-mt-unsafe): likewise
  job.traceparent = !a.traceparent.empty() ? a.traceparent : env_parent != nullptr ? env_parent : "";
  job.tracestate = !a.tracestate.empty() || !a.traceparent.empty() ? a.tracestate : env_state != nullptr ? env_state : "";
  if (auto problem = job_problem(job)) return std::unexpected(*problem);
  return job;
}

int enqueue_one(Client& client, JobSpec job, bool generated, bool json) {
  const std::string id = job.id;
  auto result = client.enqueue(std::move(job));
  if (!result) {
    const int rc = report(result.error());
    if (generated) {
      print_outcome(id, "unknown", json);
      fmt::print(stderr, "dueq: the job's id is {}: retry with --id {} (if it was accepted, the retry says so)\n", id, id);
    }
    return rc;
  }
  switch (result->status) {
    case EnqueueResult::Status::accepted: print_outcome(result->id, "accepted", json); return 0;
    case EnqueueResult::Status::duplicate:
      if (!result->existing_id.empty()) {
        if (json) fmt::print("{}\n", dump_json({{"id", bytes_json(result->id)}, {"status", "duplicate"},
                                                 {"existing_id", bytes_json(result->existing_id)}}));
        else fmt::print("{}\n", result->id);
        fmt::print(stderr, "dueq: job {} holds its unique key; nothing new was enqueued\n", loggable(result->existing_id, 200));
        return 0;
      }
      print_outcome(result->id, "duplicate", json);
      fmt::print(stderr, "dueq: job {} already existed; nothing new was enqueued\n", result->id);
      return 0;
    case EnqueueResult::Status::rejected:
      fmt::print(stderr, "dueq: rejected: {}\n", result->reason);
      // The broker marks a job this key may not enqueue so.
      return result->reason.starts_with("refused:") ? kExitRefused : kExitUsage;
    case EnqueueResult::Status::overloaded:
      fmt::print(stderr, "dueq: overloaded: {}\ndueq: retry after {} ms\n", result->reason, result->retry_after_ms);
      return kExitTempFail;
  }
  return kExitError;
}

namespace {

// One JSON line as a job, checked as the broker would check it; throws
// with what is wrong.
JobSpec job_from_line(const std::string& line) {
  const auto j = nlohmann::json::parse(line);
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  for (const auto& [key, value] : j.items())
    if (key != "queue" && key != "type" && key != "payload" && key != "delay_ms" && key != "at_ms" && key != "id" &&
        key != "max_attempts" && key != "backoff_base_ms" && key != "backoff_cap_ms" && key != "key" &&
        key != "unique_key" && key != "unique_until" && key != "unique_for_ms" && key != "start_by_ms" &&
        key != "traceparent" && key != "tracestate")
      throw std::runtime_error("unknown field '" + key + "'");
  JobSpec job;
  job.queue = j.at("queue").get<std::string>();
  job.type = j.at("type").get<std::string>();
  if (j.contains("payload")) job.payload = j["payload"].is_string() ? j["payload"].get<std::string>() : j["payload"].dump();
  if (j.contains("id")) job.id = j["id"].get<std::string>();
  if (j.contains("delay_ms") && j.contains("at_ms")) throw std::runtime_error("give delay_ms or at_ms, not both");
  if (j.contains("delay_ms")) job.due_ms = Client::in_ms(j["delay_ms"].get<int64_t>());
  if (j.contains("at_ms")) job.due_ms = j["at_ms"].get<int64_t>();
  if (j.contains("max_attempts")) job.max_attempts = j["max_attempts"].get<uint32_t>();
  if (j.contains("backoff_base_ms")) job.backoff_base_ms = j["backoff_base_ms"].get<int64_t>();
  if (j.contains("backoff_cap_ms")) job.backoff_cap_ms = j["backoff_cap_ms"].get<int64_t>();
  if (j.contains("start_by_ms")) job.start_by_ms = j["start_by_ms"].get<int64_t>();
  if (j.contains("traceparent")) job.traceparent = j["traceparent"].get<std::string>();
  if (j.contains("tracestate")) job.tracestate = j["tracestate"].get<std::string>();
  if (j.contains("key")) {
    auto key = bytes_from_json(j["key"]);
    if (!key) throw std::runtime_error("key must be a string or {\"encoding\": \"base64\", \"data\": ...}");
    job.key = std::move(*key);
  }
  std::string unique_key;
  if (j.contains("unique_key")) {
    auto bytes = bytes_from_json(j["unique_key"]);
    if (!bytes) throw std::runtime_error("unique_key must be a string or {\"encoding\": \"base64\", \"data\": ...}");
    unique_key = std::move(*bytes);
  }
  const int64_t unique_for_ms = j.contains("unique_for_ms") ? j["unique_for_ms"].get<int64_t>() : 0;
  if (unique_for_ms < 0) throw std::runtime_error("unique_for_ms: 1 or more");
  if (auto ok = set_unique(job, std::move(unique_key), j.contains("unique_until") ? j["unique_until"].get<std::string>() : "",
                           unique_for_ms);
      !ok)
    throw std::runtime_error(ok.error());
  if (auto problem = job_problem(job)) throw std::runtime_error(*problem);
  return job;
}

// Sends jobs in batches of 1,000 with up to kBatchesInFlight outstanding on
// the one connection (the file is read and sent while the broker stores
// earlier batches), and counts each outcome.
class BatchSender {
 public:
  static constexpr size_t kBatchSize = 1000;
  static constexpr size_t kBatchesInFlight = 4;

  explicit BatchSender(Client& client) : client_(client) {}

  // False once a batch has failed: no more are sent.
  bool add(JobSpec&& job, size_t line) {
    batch_.push_back(std::move(job));
    batch_lines_.push_back(line);
    return batch_.size() < kBatchSize || flush();
  }
  // Sends the batch; false once a batch has failed (the outstanding ones
  // are still settled and reported).
  bool flush() {
    if (!batch_.empty()) {
      Sent sent{{}, {}, std::move(batch_lines_)};
      for (const auto& job : batch_) sent.ids.push_back(job.id);
      sent.results = client_.enqueue_batch_async(std::move(batch_));
      in_flight_.push_back(std::move(sent));
      batch_.clear();
      batch_lines_.clear();
    }
    while (in_flight_.size() >= kBatchesInFlight ||
           (first_error_ == 0 && !in_flight_.empty() &&
            in_flight_.front().results.wait_for(std::chrono::seconds(0)) == std::future_status::ready))
      settle_oldest();
    return first_error_ == 0;
  }
  void finish() {
    if (first_error_ == 0) flush();
    while (!in_flight_.empty()) settle_oldest();
  }
  void rejected_here() { ++rejected_; }
  int first_error() const { return first_error_; }
  int print_counts(bool json) const {
    if (json) {
      fmt::print("{}\n", nlohmann::json{{"accepted", accepted_}, {"duplicate", duplicate_}, {"rejected", rejected_},
                                        {"overloaded", overloaded_}, {"retry_after_ms", retry_after_ms_}}.dump());
    } else {
      fmt::print("accepted {}, duplicate {}, rejected {}", accepted_, duplicate_, rejected_);
      if (overloaded_ > 0) fmt::print(", overloaded {} (retry after {} ms)", overloaded_, retry_after_ms_);
      fmt::print("\n");
    }
    if (rejected_ > 0) return kExitUsage;
    return overloaded_ > 0 ? kExitTempFail : 0;
  }

 private:
  struct Sent {
    std::future<std::expected<std::vector<EnqueueResult>, ClientError>> results;
    std::vector<std::string> ids;
    std::vector<size_t> lines;
  };

  void settle_oldest() {
    Sent sent = std::move(in_flight_.front());
    in_flight_.pop_front();
    auto results = sent.results.get();
    if (!results) {
      const int rc = report(results.error());
      if (first_error_ == 0) first_error_ = rc;
      // The outcome of this batch is unknown: show every id, generated ones
      // included, so that a retry can reuse them.
      for (size_t i = 0; i < sent.ids.size(); ++i)
        fmt::print(stderr, "dueq: line {}: id {} (outcome unknown)\n", sent.lines[i], sent.ids[i]);
      return;
    }
    for (size_t i = 0; i < results->size(); ++i) {
      const auto& r = (*results)[i];
      if (r.status == EnqueueResult::Status::accepted) ++accepted_;
      else if (r.status == EnqueueResult::Status::duplicate) ++duplicate_;
      else if (r.status == EnqueueResult::Status::overloaded) {
        ++overloaded_;
        retry_after_ms_ = std::max(retry_after_ms_, r.retry_after_ms);
      } else {
        ++rejected_;
        fmt::print(stderr, "dueq: line {}: rejected: {}\n", sent.lines[i], r.reason);
      }
    }
  }

  Client& client_;
  std::deque<Sent> in_flight_;
  std::vector<JobSpec> batch_;
  std::vector<size_t> batch_lines_;
  int first_error_ = 0;
  size_t accepted_ = 0, duplicate_ = 0, rejected_ = 0, overloaded_ = 0;
  uint32_t retry_after_ms_ = 0;
};

}  // namespace

int enqueue_from(Client& client, const std::string& path, bool json) {
  std::ifstream file(path);
  if (path != "-" && !file) {
    fmt::print(stderr, "dueq: cannot read {}\n", path);
    return kExitUsage;
  }
  std::istream& in = path == "-" ? std::cin : file;
  BatchSender sender(client);
  size_t line_no = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    JobSpec job;
    try {
      job = job_from_line(line);
    } catch (const std::exception& e) {
      fmt::print(stderr, "dueq: {}:{}: {}\n", path, line_no, e.what());
      sender.rejected_here();
      continue;
    }
    if (job.id.empty()) job.id = new_job_id();
    if (!sender.add(std::move(job), line_no)) break;
  }
  sender.finish();
  if (sender.first_error() != 0) return sender.first_error();
  return sender.print_counts(json);
}

}  // namespace dueq::cli
