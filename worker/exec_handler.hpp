#pragma once
// Runs one external command per job: payload on stdin, job facts in DUEQ_*
// environment variables, exit 0 = done, exit 75 (EX_TEMPFAIL) = snooze (run
// it again later, no attempt used) after the delay its last stderr line
// names (`snooze: 30s`, or `snooze-until: UNIX_MS`; 60 s when none does),
// anything else = failed with the exit code and the tail of stderr. The command runs in its own process group,
// which is killed when the job times out, the worker is force-stopped, or
// the worker dies (a guard process outlives it long enough to kill them).
#include <cstdint>
#include <string>

#include "dueq/worker.hpp"

namespace dueq {

Handler make_exec_handler(std::string command, int64_t timeout_ms);

inline constexpr int kSnoozeExitCode = 75;
inline constexpr int64_t kDefaultSnoozeMs = 60'000;
// The snooze a command's stderr asks for: its last line `snooze: DURATION`
// or `snooze-until: UNIX_MS` (the delay from `now_ms`); kDefaultSnoozeMs
// when the last line is neither.
int64_t snooze_asked_ms(std::string_view stderr_tail, int64_t now_ms);

}  // namespace dueq
