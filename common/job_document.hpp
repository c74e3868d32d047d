#pragma once
// The public job document (include/dueq/job.hpp) as a JSON value, for the
// views that put documents into a larger answer (lists, the dashboard).
#include <nlohmann/json.hpp>

#include "dueq/job.hpp"

namespace dueq {

nlohmann::json job_to_json(const JobDocument& job);

// ISO 8601 UTC with milliseconds: 2025-11-28T04:05:06.789Z.
std::string iso_time(int64_t ms);

}  // namespace dueq
