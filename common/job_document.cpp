#include "common/job_document.hpp"

#include <charconv>
#include <ctime>

#include <fmt/format.h>

#include "common/json_bytes.hpp"

namespace dueq {

namespace {

std::optional<int64_t> number(const std::map<std::string, std::string>& f, const char* key) {
  auto it = f.find(key);
  if (it == f.end()) return std::nullopt;
  int64_t v = 0;
  const auto& s = it->second;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string text(const std::map<std::string, std::string>& f, const char* key) {
  auto it = f.find(key);
  return it == f.end() ? std::string() : it->second;
}

std::optional<int64_t> whole_number(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The broker's own state names, as the document says them.
std::string public_state(const std::string& stored) { return stored == "leased" ? "running" : stored; }

std::string unescape(std::string_view field) {
  std::string out;
  out.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\' || i + 1 == field.size()) {
      out += field[i];
      continue;
    }
    const char next = field[++i];
    out += next == 'n' ? '\n' : next == 't' ? '\t' : next;
  }
  return out;
}

// "attempt N: reason" or "unstarted delivery N (not an attempt): reason",
// as brokers before the tab-separated entries wrote them.
JobError legacy_entry(std::string_view line) {
  JobError e;
  e.reason = std::string(line);
  for (const auto& [prefix, counted] : {std::pair{std::string_view("attempt "), true},
                                        std::pair{std::string_view("unstarted delivery "), false}}) {
    if (!line.starts_with(prefix)) continue;
    const auto rest = line.substr(prefix.size());
    const auto colon = rest.find(": ");
    if (colon == std::string_view::npos) continue;
    auto head = rest.substr(0, colon);
    head = head.substr(0, head.find(' '));
    if (auto n = whole_number(head)) {
      e.number = n;
      e.counted = counted;
      e.reason = std::string(rest.substr(colon + 2));
    }
  }
  return e;
}

JobError entry(std::string_view line) {
  std::vector<std::string_view> parts;
  for (size_t at = 0; parts.size() < 3;) {
    const auto tab = line.find('\t', at);
    if (tab == std::string_view::npos) break;
    parts.push_back(line.substr(at, tab - at));
    at = tab + 1;
    if (parts.size() == 3) parts.push_back(line.substr(at));
  }
  if (parts.size() != 4) return legacy_entry(line);
  JobError e;
  const auto space = parts[0].find(' ');
  const auto kind = parts[0].substr(0, space);
  if (space == std::string_view::npos || (kind != "attempt" && kind != "unstarted")) return legacy_entry(line);
  e.counted = kind == "attempt";
  e.number = whole_number(parts[0].substr(space + 1));
  e.at_ms = whole_number(parts[1]);
  e.worker = unescape(parts[2]);
  e.reason = unescape(parts[3]);
  return e;
}

nlohmann::json optional_number(const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

nlohmann::json optional_time(const std::optional<int64_t>& v) {
  return v && *v > 0 ? nlohmann::json(iso_time(*v)) : nlohmann::json(nullptr);
}

}  // namespace

std::string iso_time(int64_t ms) {
  const time_t secs = static_cast<time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", buffer, ms % 1000);
}

std::vector<JobError> parse_error_log(std::string_view log) {
  std::vector<JobError> out;
  for (size_t at = 0; at < log.size();) {
    const size_t end = std::min(log.find('\n', at), log.size());
    if (end > at) out.push_back(entry(log.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

JobDocument job_document(const std::map<std::string, std::string>& f) {
  JobDocument job;
  job.id = text(f, "id");
  job.queue = text(f, "queue");
  job.state = public_state(text(f, "s"));
  job.record_kept = f.contains("t");
  job.type = text(f, "t");
  job.key = text(f, "k");
  if (auto it = f.find("p"); it != f.end()) {
    job.payload = it->second;
    job.payload_bytes = it->second.size();
  } else if (auto bytes = number(f, "p_bytes")) {
    job.payload_bytes = static_cast<uint64_t>(*bytes);
  } else if (job.record_kept) {
    job.payload = std::string();
    job.payload_bytes = 0;
  }
  job.due_ms = number(f, "d");
  job.run_at_ms = number(f, "r");
  job.start_by_ms = number(f, "sb");
  job.traceparent = text(f, "tp");
  job.tracestate = text(f, "ts");
  job.created_ms = number(f, "c");
  job.lease_deadline_ms = number(f, "l");
  job.started_ms = number(f, "st");
  job.worker = text(f, "w");
  job.finished_ms = number(f, "f");
  if (!job.finished_ms) job.finished_ms = number(f, "died_ms");
  job.attempt = number(f, "a");
  job.max_attempts = number(f, "m");
  job.backoff_base_ms = number(f, "bb");
  job.backoff_cap_ms = number(f, "bc");
  job.last_error = text(f, "e");
  job.errors = parse_error_log(text(f, "el"));
  if (auto it = f.find("rs"); it != f.end()) job.result = it->second;
  if (auto percent = number(f, "pg")) job.progress = JobProgress{*percent, text(f, "pt"), number(f, "pa")};
  job.cancel_requested = text(f, "cx") == "1";
  job.waiting_for_key = text(f, "pk") == "1";
  job.unique_key = text(f, "uk");
  job.unique_until = text(f, "uu");
  job.version = text(f, "v");
  job.parent = text(f, "gp");
  job.batch = text(f, "gb");
  job.has_children = text(f, "gc") == "1";
  const std::string also = text(f, "also_in");
  for (size_t at = 0; at < also.size();) {
    const size_t comma = std::min(also.find(',', at), also.size());
    job.also_in.push_back(also.substr(at, comma - at));
    at = comma + 1;
  }
  return job;
}

nlohmann::json job_to_json(const JobDocument& job) {
  using nlohmann::json;
  json errors = json::array();
  for (const auto& e : job.errors)
    errors.push_back({{"attempt", e.counted ? optional_number(e.number) : json(nullptr)},
                      {"unstarted_delivery", e.counted ? json(nullptr) : optional_number(e.number)},
                      {"at", optional_time(e.at_ms)},
                      {"at_ms", optional_number(e.at_ms)},
                      {"worker", e.worker.empty() ? json(nullptr) : bytes_json(e.worker)},
                      {"reason", bytes_json(e.reason)}});
  json also = json::array();
  for (const auto& q : job.also_in) also.push_back(bytes_json(q));
  const auto text_or_null = [&](const std::string& s) { return job.record_kept ? bytes_json(s) : json(nullptr); };
  json out{{"id", bytes_json(job.id)},
           {"queue", bytes_json(job.queue)},
           {"state", job.state},
           {"type", text_or_null(job.type)},
           {"key", job.key.empty() ? json(nullptr) : bytes_json(job.key)},
           {"unique_key", job.unique_key.empty() ? json(nullptr) : bytes_json(job.unique_key)},
           {"unique_until", job.unique_until.empty() ? json(nullptr) : json(job.unique_until)},
           {"parent", job.parent.empty() ? json(nullptr) : bytes_json(job.parent)},
           {"batch", job.batch.empty() ? json(nullptr) : bytes_json(job.batch)},
           {"has_children", job.has_children},
           {"payload", job.payload ? bytes_json(*job.payload) : json(nullptr)},
           {"payload_bytes", job.payload_bytes ? json(*job.payload_bytes) : json(nullptr)},
           {"result", job.result ? bytes_json(*job.result) : json(nullptr)},
           {"progress", job.progress ? json{{"percent", job.progress->percent},
                                            {"text", bytes_json(job.progress->text)},
                                            {"at", optional_time(job.progress->at_ms)},
                                            {"at_ms", optional_number(job.progress->at_ms)}}
                                     : json(nullptr)},
           {"due", optional_time(job.due_ms)},
           {"due_ms", optional_number(job.due_ms)},
           {"run_at", optional_time(job.run_at_ms)},
           {"run_at_ms", optional_number(job.run_at_ms)},
           {"start_by", optional_time(job.start_by_ms)},
           {"start_by_ms", optional_number(job.start_by_ms)},
           {"traceparent", job.traceparent.empty() ? json(nullptr) : json(job.traceparent)},
           {"tracestate", job.tracestate.empty() ? json(nullptr) : json(job.tracestate)},
           {"created", optional_time(job.created_ms)},
           {"created_ms", optional_number(job.created_ms)},
           {"lease_deadline", optional_time(job.lease_deadline_ms)},
           {"lease_deadline_ms", optional_number(job.lease_deadline_ms)},
           {"started", optional_time(job.started_ms)},
           {"started_ms", optional_number(job.started_ms)},
           {"worker", job.worker.empty() ? json(nullptr) : bytes_json(job.worker)},
           {"finished", optional_time(job.finished_ms)},
           {"finished_ms", optional_number(job.finished_ms)},
           {"attempt", optional_number(job.attempt)},
           {"max_attempts", optional_number(job.max_attempts)},
           {"backoff_base_ms", optional_number(job.backoff_base_ms)},
           {"backoff_cap_ms", optional_number(job.backoff_cap_ms)},
           {"last_error", job.last_error.empty() ? json(nullptr) : bytes_json(job.last_error)},
           {"errors", std::move(errors)},
           {"cancel_requested", job.cancel_requested},
           {"waiting_for_key", job.waiting_for_key},
           {"record_kept", job.record_kept},
           {"version", job.version.empty() ? json(nullptr) : json(job.version)},
           {"also_in", std::move(also)}};
  return out;
}

std::string job_json(const JobDocument& job, int indent) { return dump_json(job_to_json(job), indent); }

}  // namespace dueq
