#pragma once
// What `dueq` says when the first word that is not an option names no
// command: the nearest command when one is close (a typo), else a pointer
// to --help. Pure: the commands and the arguments are given.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace dueq::cli {

// Edits (insertions, deletions, substitutions) that turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b);

// `args`: the command line without the program's name. An option's value
// follows it unless given as --flag=value. nullopt when the first word
// that is not an option names a command, or there is none.
std::optional<std::string> nearest_command(const std::vector<std::string>& commands, const std::vector<std::string>& args);

}  // namespace dueq::cli
