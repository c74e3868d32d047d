#pragma once
// What this binary was built from, for logs and benchmark records: the git
// commit of the source tree at build time ("-dirty" when it had uncommitted
// changes; "unknown" outside git) and the CMake build type with sanitizers.

namespace dueq {

const char* build_commit();
const char* build_type();

}  // namespace dueq
