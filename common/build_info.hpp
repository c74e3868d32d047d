#pragma once
// What this binary was built from, for --version, logs and benchmark
// records: the project's version, the git commit of the source tree at build
// time ("-dirty" when it had uncommitted changes; "unknown" outside git) and
// the CMake build type with sanitizers.

#include <string>
#include <string_view>

namespace dueq {

const char* build_commit();
const char* build_type();
const char* version();  // the project's (CMake's PROJECT_VERSION)
// What `--version` prints: "PROGRAM VERSION (commit C, BUILD_TYPE)".
inline std::string version_text(std::string_view program) {
  return std::string(program) + " " + version() + " (commit " + build_commit() + ", " + build_type() + ")";
}

}  // namespace dueq
