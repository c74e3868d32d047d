# Writes OUT_HEADER (lua::ScriptId, one id per script file name) and
# OUT_SOURCE (each script's text and SHA1), so the broker carries its scripts,
# needs no files at run time and can build EVALSHA calls before loading them.
string(REPLACE "," ";" SCRIPTS "${SCRIPTS}")
set(ids "")
set(body "// Generated from lua/*.lua by lua/embed.cmake. Do not edit.\n#include \"lua/scripts.hpp\"\nnamespace dueq::lua {\n")
set(table "")
list(LENGTH SCRIPTS count)
foreach(path ${SCRIPTS})
  get_filename_component(name ${path} NAME_WE)
  file(READ ${path} text)
  # A script that includes lib/fence.lua is sent with the queue's epoch key
  # and the leader's epoch appended (broker/store/redis_client.cpp).
  string(FIND "${text}" "--! include lib/fence.lua" fence_at)
  if(fence_at EQUAL -1)
    set(fenced false)
  else()
    set(fenced true)
  endif()
  # A line "--! include lib/NAME.lua" is replaced by that file: EVALSHA
  # scripts cannot share functions any other way.
  string(REGEX MATCHALL "--! include [a-z_/]+\\.lua" includes "${text}")
  foreach(line ${includes})
    string(REPLACE "--! include " "" lib ${line})
    get_filename_component(dir ${path} DIRECTORY)
    file(READ ${dir}/${lib} lib_text)
    string(REPLACE "${line}" "${lib_text}" text "${text}")
  endforeach()
  # Redis names a script by the SHA1 of exactly these bytes.
  string(SHA1 sha "${text}")
  string(APPEND ids "${name}, ")
  string(APPEND body "static const char k_${name}[] = R\"dueqlua(${text})dueqlua\";\n")
  string(APPEND table "  {ScriptId::${name}, \"${name}\", k_${name}, \"${sha}\", ${fenced}},\n")
endforeach()
string(APPEND body "const std::array<ScriptSource, kScriptCount> kScripts = {{\n${table}}};\n}  // namespace dueq::lua\n")
set(header "// Generated from lua/*.lua by lua/embed.cmake. Do not edit.
#pragma once
#include <array>
#include <cstddef>

namespace dueq::lua {

// One id per lua/*.lua file, in file-name order.
enum class ScriptId : size_t { ${ids}};
inline constexpr size_t kScriptCount = ${count};

struct ScriptSource {
  ScriptId id;
  const char* name;
  const char* source;
  const char* sha1;  // what SCRIPT LOAD answers and EVALSHA takes
  bool fenced;       // includes lib/fence.lua: sent with the queue's epoch key and the leader's epoch last
};

// Indexed by ScriptId.
extern const std::array<ScriptSource, kScriptCount> kScripts;

inline const ScriptSource& script(ScriptId id) { return kScripts[static_cast<size_t>(id)]; }

}  // namespace dueq::lua
")
file(WRITE ${OUT_HEADER} "${header}")
file(WRITE ${OUT_SOURCE} "${body}")
