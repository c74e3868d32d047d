#pragma once
#include <string>

namespace dueq {

// A new job id: 26 Crockford base32 characters (48-bit ms time + 80 random
// bits), so ids sort by creation time and never collide in practice.
std::string new_job_id();

// A random identifier for processes (broker instance, worker) in hex.
std::string new_instance_id();

}  // namespace dueq
