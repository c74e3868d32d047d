#pragma once
// A periodic entry: a cron schedule (common/cron.hpp) and the job each of
// its ticks enqueues. From the config file ([cron.NAME]) or `dueq cron add`
// (stored in Redis as JSON under kCronEntriesKey).
#include <cstdint>
#include <string>
#include <string_view>

#include "common/cron.hpp"
#include "common/error.hpp"

namespace dueq::broker {

struct CronEntry {
  std::string name;
  CronSchedule schedule;
  std::string queue;
  std::string type;
  std::string payload;
  bool run_missed_once = false;  // misfire "run_once"; "skip" otherwise
  uint32_t max_attempts = 0;     // 0: the queue's
  bool from_config = false;

  // 16 hex digits of a hash of everything that makes the entry's jobs: a
  // changed entry starts its ticks afresh.
  std::string fingerprint() const;
  // The definition as `dueq cron add` stores it (JSON), and back.
  std::string to_json() const;
  static Result<CronEntry> from_json(const std::string& name, std::string_view json);
};

// Checks every part of an entry; the schedule is parsed here.
struct CronDefinition {
  std::string schedule, time_zone = "UTC", queue, type, payload, misfire = "skip";
  uint32_t max_attempts = 0;
};
Result<CronEntry> make_cron_entry(const std::string& name, const CronDefinition& definition);

// `dueq cron add` entries: hash name -> definition (JSON).
inline const std::string kCronEntriesKey = "dueq:cron";
// The most entries, config and Redis together: each costs work every turn.
constexpr size_t kMaxCronEntries = 1'000;

}  // namespace dueq::broker
