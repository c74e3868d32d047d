#pragma once
// The Lua scripts in this folder, embedded at build time (see embed.cmake).
#include <array>
#include <cstddef>

namespace dueq::lua {

enum class ScriptId : size_t { enqueue, promote, lease, ack, nack, extend, reclaim, stats, cancel, replay, purge, cap_leases, audit, repair, sweep, show, scan_ids, migrate_schedule, filter_check };
inline constexpr size_t kScriptCount = 19;

struct ScriptSource {
  ScriptId id;
  const char* name;
  const char* source;
};

// Indexed by ScriptId.
extern const std::array<ScriptSource, kScriptCount> kScripts;

}  // namespace dueq::lua
