#include "broker/config/cron_entry.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "common/json_bytes.hpp"
#include "common/names.hpp"

namespace dueq::broker {

namespace {
constexpr size_t kMaxPayloadBytes = size_t{64} * 1024;
}  // namespace

Result<CronEntry> make_cron_entry(const std::string& name, const CronDefinition& d) {
  auto named = validate_queue_name(name);  // the same characters as a queue name: it is part of every tick's id
  if (!named) return fail(Errc::bad_argument, fmt::format("cron entry '{}': a name is 1..64 of A-Z a-z 0-9 _ - .", name));
  auto bad = [&](const std::string& why) { return fail(Errc::bad_argument, fmt::format("cron entry '{}': {}", name, why)); };
  if (d.schedule.empty()) return bad("needs a schedule (a cron expression)");
  auto schedule = CronSchedule::parse(d.schedule, d.time_zone);
  if (!schedule) return bad(schedule.error().message);
  if (auto ok = validate_queue_name(d.queue); !ok) return bad(d.queue.empty() ? "needs a queue" : ok.error().message);
  if (auto ok = validate_job_type(d.type); !ok) return bad(d.type.empty() ? "needs a type" : ok.error().message);
  if (d.payload.size() > kMaxPayloadBytes) return bad(fmt::format("payload longer than {} bytes", kMaxPayloadBytes));
  if (d.misfire != "skip" && d.misfire != "run_once") return bad("misfire must be skip or run_once");
  if (d.max_attempts > 1000) return bad("max_attempts must be 0..1000 (0: the queue's)");
  return CronEntry{name, std::move(*schedule), d.queue, d.type, d.payload, d.misfire == "run_once", d.max_attempts, false};
}

std::string CronEntry::fingerprint() const {
  const std::string canonical = fmt::format("{}\n{}\n{}\n{}\n{}\n{}", schedule.expression(), schedule.time_zone(), queue,
                                            type, payload, max_attempts);
  return fmt::format("{:016x}", XXH3_64bits(canonical.data(), canonical.size()));
}

std::string CronEntry::to_json() const {
  return nlohmann::json{{"schedule", schedule.expression()}, {"time_zone", schedule.time_zone()}, {"queue", queue},
                        {"type", type}, {"payload", bytes_json(payload)}, {"misfire", run_missed_once ? "run_once" : "skip"},
                        {"max_attempts", max_attempts}}
      .dump();  // every value is UTF-8 here: names and the schedule are checked, the payload through bytes_json
}

Result<CronEntry> CronEntry::from_json(const std::string& name, std::string_view json) {
  const auto parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return fail(Errc::bad_argument, fmt::format("cron entry '{}': stored definition is not JSON", name));
  CronDefinition d;
  auto text = [&](const char* key, std::string& out) {
    if (auto it = parsed.find(key); it != parsed.end() && it->is_string()) out = it->get<std::string>();
  };
  text("schedule", d.schedule);
  text("time_zone", d.time_zone);
  text("queue", d.queue);
  text("type", d.type);
  if (auto it = parsed.find("payload"); it != parsed.end()) {
    auto payload = bytes_from_json(*it);
    if (!payload) return fail(Errc::bad_argument, fmt::format("cron entry '{}': stored payload is neither text nor base64", name));
    d.payload = std::move(*payload);
  }
  text("misfire", d.misfire);
  if (auto it = parsed.find("max_attempts"); it != parsed.end() && it->is_number_unsigned() && it->get<uint64_t>() <= 1000)
    d.max_attempts = it->get<uint32_t>();
  return make_cron_entry(name, d);
}

}  // namespace dueq::broker
