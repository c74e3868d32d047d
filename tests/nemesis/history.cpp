#include "tests/nemesis/history.hpp"

#include <fmt/format.h>

#include <fstream>
#include <string_view>
#include <sstream>

namespace dueq::nemesis {

namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t from = 0;
  while (true) {
    const size_t tab = line.find('\t', from);
    fields.push_back(line.substr(from, tab == std::string::npos ? std::string::npos : tab - from));
    if (tab == std::string::npos) return fields;
    from = tab + 1;
  }
}

std::optional<int64_t> number(const std::string& text) {
  try {
    size_t used = 0;
    const int64_t value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Calls `take(fields)` for each line of `file` (absent: no lines); false,
// with `error` set, at the first line `take` refuses.
template <typename Take>
bool each_line(const std::filesystem::path& file, std::string& error, Take take) {
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    if (!take(split_tabs(line))) {
      error = fmt::format("{}:{}: cannot read '{}'", file.string(), n, line);
      return false;
    }
  }
  return true;
}

bool read_starts(const std::filesystem::path& file, std::vector<Start>& out, std::string& error) {
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream fields(line);
    Start s;
    if (!(fields >> s.id >> s.attempt >> s.token >> s.start_us)) {
      // A worker SIGKILLed mid-write leaves a partial last line.
      if (in.peek() == EOF) break;
      error = fmt::format("{}:{}: cannot read '{}'", file.string(), n, line);
      return false;
    }
    // The example worker's eight fields go on with the due time it was sent.
    std::string pid_or_due;
    int64_t due = 0, created = 0;
    if (fields >> due >> created >> pid_or_due) {
      s.due_ms = due;
      fields >> s.payload >> s.traceparent;
    }
    s.worker = file.filename().string();
    out.push_back(std::move(s));
  }
  return true;
}

}  // namespace

int64_t History::fact(const std::string& name, int64_t otherwise) const {
  auto it = facts.find(name);
  return it == facts.end() ? otherwise : it->second;
}

std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

std::string unhex(const std::string& text) {
  std::string out;
  for (size_t i = 0; i + 1 < text.size(); i += 2) out += static_cast<char>(std::stoi(text.substr(i, 2), nullptr, 16));
  return out;
}

void append_line(const std::filesystem::path& file, const std::vector<std::string>& fields) {
  std::ofstream out(file, std::ios::app);
  for (size_t i = 0; i < fields.size(); ++i) out << (i == 0 ? "" : "\t") << fields[i];
  out << "\n";
}

std::optional<History> read_history(const std::filesystem::path& dir, std::string& error) {
  History h;
  const bool read = each_line(dir / "accepted.tsv", error, [&](const std::vector<std::string>& f) {
    const bool fields = f.size() == 6 || f.size() == 7;
    auto due = fields ? number(f[2]) : std::nullopt;
    auto attempts = fields ? number(f[3]) : std::nullopt;
    auto answered = fields ? number(f[5]) : std::nullopt;
    if (!due || !attempts || !answered || (f[4] != "accepted" && f[4] != "unknown")) return false;
    h.accepted.push_back({f[0], f[1], *due, static_cast<int>(*attempts), f[4] == "accepted", *answered, f.size() == 7 ? f[6] : ""});
    return true;
  }) && each_line(dir / "cancels.tsv", error, [&](const std::vector<std::string>& f) {
    h.cancels.push_back(f[0]);
    return true;
  }) && each_line(dir / "reschedules.tsv", error, [&](const std::vector<std::string>& f) {
    auto due = f.size() == 2 ? number(f[1]) : std::nullopt;
    if (!due) return false;
    h.reschedules[f[0]] = *due;
    return true;
  }) && each_line(dir / "deadlines.tsv", error, [&](const std::vector<std::string>& f) {
    auto at = f.size() == 2 ? number(f[1]) : std::nullopt;
    if (!at) return false;
    h.deadlines[f[0]] = *at;
    return true;
  }) && each_line(dir / "traces.tsv", error, [&](const std::vector<std::string>& f) {
    if (f.size() != 2) return false;
    h.traces[f[0]] = f[1];
    return true;
  }) && each_line(dir / "edits.tsv", error, [&](const std::vector<std::string>& f) {
    if (f.size() != 2) return false;
    h.edits[f[0]] = f[1];
    return true;
  }) && each_line(dir / "deletes.tsv", error, [&](const std::vector<std::string>& f) {
    auto from = f.size() == 3 ? number(f[1]) : std::optional<int64_t>(0);
    auto to = f.size() == 3 ? number(f[2]) : std::optional<int64_t>(0);
    if (!from || !to || (f.size() != 1 && f.size() != 3)) return false;
    h.deleted_queues.insert(f[0]);
    h.deletes.push_back({f[0], *from, *to});
    return true;
  }) && each_line(dir / "keys.tsv", error, [&](const std::vector<std::string>& f) {
    if (f.size() != 2 || f[1].empty()) return false;
    h.keys[f[0]] = f[1];
    return true;
  }) && each_line(dir / "searches.tsv", error, [&](const std::vector<std::string>& f) {
    auto at = f.size() == 3 || f.size() == 6 ? number(f[1]) : std::nullopt;
    if (!at || (f[2] != "found" && f[2] != "missing")) return false;
    SearchSeen seen{f[0], *at, f[2] == "found"};
    if (f.size() == 6) {
      auto answered = number(f[3]);
      if (!answered) return false;
      seen.answered_ms = *answered;
      seen.summary = f[4];
      seen.state_after = f[5];
    }
    h.searches.push_back(std::move(seen));
    return true;
  }) && each_line(dir / "waits.tsv", error, [&](const std::vector<std::string>& f) {
    auto asked = f.size() == 6 ? number(f[1]) : std::nullopt;
    auto answered = f.size() == 6 ? number(f[2]) : std::nullopt;
    if (!asked || !answered) return false;
    h.waits.push_back({f[0], *asked, *answered, f[3], unhex(f[4]), unhex(f[5])});
    return true;
  }) && each_line(dir / "progress.tsv", error, [&](const std::vector<std::string>& f) {
    auto percent = f.size() == 3 ? number(f[2]) : std::nullopt;
    if (!percent) return false;
    h.progress.push_back({f[0], f[1], *percent});
    return true;
  }) && each_line(dir / "unique.tsv", error, [&](const std::vector<std::string>& f) {
    auto sent = f.size() == 6 || f.size() == 8 ? number(f[3]) : std::nullopt;
    auto answered = f.size() == 6 || f.size() == 8 ? number(f[4]) : std::nullopt;
    if (!sent || !answered || (f[2] != "accepted" && f[2] != "held" && f[2] != "unknown") || (f[2] == "held") == f[5].empty() ||
        (f.size() == 8 && f[6] != "done" && f[6] != "debounce"))
      return false;
    h.uniques.push_back({f[0], f[1], f[2], *sent, *answered, f[5], f.size() == 8 ? f[6] : "done", f.size() == 8 ? f[7] : ""});
    return true;
  }) && each_line(dir / "groups.tsv", error, [&](const std::vector<std::string>& f) {
    if (f.size() != 7 || f[3].size() != 1 || f[5].size() != 1 || (f[6] != "accepted" && f[6] != "unknown") ||
        std::string_view("fic-").find(f[3][0]) == std::string_view::npos ||
        std::string_view("jsc").find(f[5][0]) == std::string_view::npos)
      return false;
    h.group_jobs.push_back({f[0], f[1], f[2], f[3][0], f[4], f[5][0], f[6] == "accepted"});
    return true;
  }) && each_line(dir / "asks.tsv", error, [&](const std::vector<std::string>& f) {
    auto at = f.size() == 2 ? number(f[1]) : std::nullopt;
    if (!at) return false;
    h.asks[f[0]].push_back(*at);
    return true;
  }) && each_line(dir / "faults.tsv", error, [&](const std::vector<std::string>& f) {
    auto from = f.size() == 5 ? number(f[0]) : std::nullopt;
    auto to = f.size() == 5 ? number(f[1]) : std::nullopt;
    auto shift = f.size() == 5 ? number(f[4]) : std::nullopt;
    if (!from || !to || !shift) return false;
    h.faults.push_back({*from, *to, f[2], f[3], *shift});
    return true;
  }) && each_line(dir / "final.tsv", error, [&](const std::vector<std::string>& f) {
    auto finished = f.size() == 6 ? number(f[2]) : std::nullopt;
    auto attempt = f.size() == 6 ? number(f[5]) : std::nullopt;
    if (!finished || !attempt) return false;
    h.finals[f[0]] = FinalState{f[1], *finished, unhex(f[3]), unhex(f[4]), *attempt};
    return true;
  }) && each_line(dir / "ticks.tsv", error, [&](const std::vector<std::string>& f) {
    auto due = f.size() == 3 ? number(f[1]) : std::nullopt;
    if (!due || (f[2] != "found" && f[2] != "missing")) return false;
    h.ticks.push_back({f[0], *due, f[2] == "found"});
    return true;
  }) && each_line(dir / "facts.tsv", error, [&](const std::vector<std::string>& f) {
    auto value = f.size() == 2 ? number(f[1]) : std::nullopt;
    if (!value) return false;
    h.facts[f[0]] = *value;
    return true;
  });
  if (!read) return std::nullopt;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("starts-") && !read_starts(entry.path(), h.starts, error)) return std::nullopt;
  }
  return h;
}

}  // namespace dueq::nemesis
