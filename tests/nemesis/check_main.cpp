// Checks a kept nemesis run again from its history files (history.hpp):
//
//   nemesis_check /tmp/dueq-nemesis-XXXX
//
// Exit 0: every promise held; 1: the checker found violations (listed);
// 2: the history cannot be read.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "tests/nemesis/checker.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: nemesis_check RUN_DIR\n");
    return 2;
  }
  if (!std::filesystem::is_directory(argv[1])) {
    fmt::print(stderr, "nemesis_check: {} is not a run's directory\nusage: nemesis_check RUN_DIR\n", argv[1]);
    return 2;
  }
  std::string error;
  auto history = dueq::nemesis::read_history(argv[1], error);
  if (!history) {
    fmt::print(stderr, "nemesis_check: {}\n", error);
    return 2;
  }
  // A named schedule's run says its name in schedule.txt.
  std::string schedule_name;
  std::getline(std::ifstream(std::filesystem::path(argv[1]) / "schedule.txt"), schedule_name);
  const auto verdict = dueq::nemesis::check(*history, dueq::nemesis::bounds_for(schedule_name));
  fmt::print("{}", verdict.report());
  return verdict.violations.empty() ? 0 : 1;
}
