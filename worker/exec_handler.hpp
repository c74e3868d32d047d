#pragma once
// Runs one external command per job: payload on stdin, job facts in DUEQ_*
// environment variables, exit 0 = done, anything else = failed with the exit
// code and the tail of stderr. The command runs in its own process group,
// which is killed when the job times out, the worker is force-stopped, or
// the worker dies (a guard process outlives it long enough to kill them).
#include <cstdint>
#include <string>

#include "dueq/worker.hpp"

namespace dueq {

Handler make_exec_handler(std::string command, int64_t timeout_ms);

}  // namespace dueq
