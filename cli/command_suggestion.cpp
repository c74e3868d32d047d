#include "cli/command_suggestion.hpp"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

namespace dueq::cli {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest_command(const std::vector<std::string>& commands, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word.starts_with("-")) {
      if (word.find('=') == std::string::npos && word != "--help" && word != "-h" && word != "--version") ++i;
      continue;
    }
    if (std::find(commands.begin(), commands.end(), word) != commands.end()) return std::nullopt;
    std::string best;
    size_t best_distance = SIZE_MAX;
    for (const auto& name : commands)
      if (const size_t d = edit_distance(word, name); d < best_distance) best_distance = d, best = name;
    // A third of the name's letters (at least one) wrong is still a typo.
    if (best_distance <= std::max<size_t>(1, best.size() / 3))
      return fmt::format("no command '{}'; did you mean '{}'? (dueq --help lists them)", word, best);
    return fmt::format("no command '{}' (dueq --help lists them)", word);
  }
  return std::nullopt;
}

}  // namespace dueq::cli
