# Writes OUT: a C++ source with each Lua script as a string constant, so the
# broker carries its scripts and needs no files at run time.
set(body "// Generated from lua/*.lua by lua/embed.cmake. Do not edit.\n#include \"lua/scripts.hpp\"\nnamespace dueq::lua {\n")
set(table "")
string(REPLACE "," ";" SCRIPTS "${SCRIPTS}")
foreach(path ${SCRIPTS})
  get_filename_component(name ${path} NAME_WE)
  file(READ ${path} text)
  # A line "--! include lib/NAME.lua" is replaced by that file: EVALSHA
  # scripts cannot share functions any other way.
  string(REGEX MATCHALL "--! include [a-z_/]+\\.lua" includes "${text}")
  foreach(line ${includes})
    string(REPLACE "--! include " "" lib ${line})
    get_filename_component(dir ${path} DIRECTORY)
    file(READ ${dir}/${lib} lib_text)
    string(REPLACE "${line}" "${lib_text}" text "${text}")
  endforeach()
  string(APPEND body "static const char k_${name}[] = R\"dueqlua(${text})dueqlua\";\n")
  string(APPEND table "  {ScriptId::${name}, \"${name}\", k_${name}},\n")
endforeach()
string(APPEND body "const std::array<ScriptSource, kScriptCount> kScripts = {{\n${table}}};\n}  // namespace dueq::lua\n")
file(WRITE ${OUT} "${body}")
