#pragma once
// Runs the command a checked `dueq` command line chose.
#include <cstdint>
#include <optional>

#include "cli/invocation.hpp"

namespace dueq::cli {

// `dueq keygen`: a new CURVE key pair written to files; the exit code.
int write_key_pair(const Invocation& v);

// Runs the chosen command against the broker; returns the exit code.
int run_command(Client& client, Invocation& v, std::optional<JobSpec>&& job, bool generated_id, int64_t interval_ms);

}  // namespace dueq::cli
