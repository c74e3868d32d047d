// cli/command_suggestion.hpp: the nearest command to a mistyped one.
#include "cli/command_suggestion.hpp"

#include <gtest/gtest.h>

using dueq::cli::edit_distance;
using dueq::cli::nearest_command;

TEST(CommandSuggestion, EditDistanceCountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0U);
  EXPECT_EQ(edit_distance("stats", "stats"), 0U);
  EXPECT_EQ(edit_distance("enqeue", "enqueue"), 1U);  // an insertion
  EXPECT_EQ(edit_distance("statss", "stats"), 1U);    // a deletion
  EXPECT_EQ(edit_distance("stots", "stats"), 1U);     // a substitution
  EXPECT_EQ(edit_distance("", "top"), 3U);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3U);
}

TEST(CommandSuggestion, ATypoIsNamedWithTheNearestCommandAndAnythingElseWithHelp) {
  const std::vector<std::string> commands = {"enqueue", "stats", "search", "top", "dead"};
  EXPECT_EQ(nearest_command(commands, {"enqeue", "q"}), "no command 'enqeue'; did you mean 'enqueue'? (dueq --help lists them)");
  EXPECT_EQ(nearest_command(commands, {"--broker", "tcp://h:1", "sats"}),
            "no command 'sats'; did you mean 'stats'? (dueq --help lists them)")
      << "an option's value is not a command";
  EXPECT_EQ(nearest_command(commands, {"--broker=tcp://h:1", "frobnicate"}), "no command 'frobnicate' (dueq --help lists them)");
  EXPECT_EQ(nearest_command(commands, {"tap"}), "no command 'tap'; did you mean 'top'? (dueq --help lists them)");
  EXPECT_EQ(nearest_command(commands, {"sttas"}), "no command 'sttas' (dueq --help lists them)")
      << "a swap is two edits, more than a third of five letters";
  EXPECT_EQ(nearest_command(commands, {"tpx"}), "no command 'tpx' (dueq --help lists them)") << "two of three letters wrong";
  EXPECT_EQ(nearest_command(commands, {"--json", "x", "stats"}), std::nullopt) << "--json took x as its value here";
  EXPECT_EQ(nearest_command(commands, {"stats", "whatever"}), std::nullopt);
  EXPECT_EQ(nearest_command(commands, {"--help"}), std::nullopt);
  EXPECT_EQ(nearest_command(commands, {}), std::nullopt);
}
