#pragma once
// Runs one external command per job: payload on stdin, job facts in DUEQ_*
// environment variables, exit 0 = done, exit 75 (EX_TEMPFAIL) = snooze (run
// it again later, no attempt used) after the delay its last stderr line
// names (`snooze: 30s`, or `snooze-until: UNIX_MS`; 60 s when none does),
// anything else = failed with the exit code and the tail of stderr. The command runs in its own process group,
// which is killed when the job times out, the worker is force-stopped, or
// the worker dies (a guard process outlives it long enough to kill them).
// Lines written to descriptor 4 (DUEQ_PROGRESS_FILE) report progress:
// `PERCENT[%] [TEXT]`, e.g. `echo "40 resized 4 of 10" >&4`.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dueq/worker.hpp"

namespace dueq {

Handler make_exec_handler(std::string command, int64_t timeout_ms);

inline constexpr int kSnoozeExitCode = 75;
inline constexpr int64_t kDefaultSnoozeMs = 60'000;
// The snooze a command's stderr asks for: its last line `snooze: DURATION`
// or `snooze-until: UNIX_MS` (the delay from `now_ms`); kDefaultSnoozeMs
// when the last line is neither.
int64_t snooze_asked_ms(std::string_view stderr_tail, int64_t now_ms);

// One line a command wrote to DUEQ_PROGRESS_FILE: `PERCENT[%][ TEXT]`
// (PERCENT a whole number, clamped to 0..100 when reported); nullopt for
// any other line, which is ignored.
struct ProgressReport {
  int64_t percent = 0;
  std::string_view text;
};
std::optional<ProgressReport> parse_progress_line(std::string_view line);

}  // namespace dueq
