// dueq-bench: measures the performance targets of DESIGN.md on this machine.
// Every scenario (bench/scenarios/) starts its own redis-server (AOF
// everysec, noeviction), a broker and worker processes, runs several times,
// and reports medians with their min-max spread next to a baseline measured
// in the same run.
//
//   dueq-bench                      all scenarios, 3 runs each
//   dueq-bench --scenario lateness  one scenario
//   dueq-bench --smoke              small sizes, one run: checks the driver works
#include <sys/utsname.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "bench/scenarios.hpp"
#include "common/build_info.hpp"
#include "common/clock.hpp"

using namespace dueq;
using namespace dueq::bench;

int main(int argc, char** argv) {
  Options o;
  std::string scenario = "all", out = "bench/results/results.jsonl";
  bool json = false;
  std::vector<std::string> names = {"all"};
  std::string help = "all (every scenario but peers), or one of:";
  for (const auto& s : scenarios()) {
    names.push_back(s.name);
    help += fmt::format("\n  {}: {}", s.name, s.summary);
  }
  CLI::App app{"dueq-bench: measure dueq against the targets in DESIGN.md"};
  app.add_option("--scenario", scenario, help)->check(CLI::IsMember(names));
  app.add_option("--peers-dir", o.peers_dir, "where bullmq_bench.js and its node_modules are (peers scenario)");
  app.add_option("--latency-rate", o.latency_rate, "jobs/s for the latency scenario (default: half the steady maximum measured in the same invocation, else 20,000)")
      ->check(CLI::Range(100.0, 1'000'000.0));
  app.add_option("--single-modes", o.single_modes, "the single scenario's producers: clients, threads, async (futures) and/or callbacks")
      ->check(CLI::IsMember({"clients", "threads", "async", "callbacks"}));
  app.add_option("--runs", o.runs, "runs per scenario (median reported)")->check(CLI::Range(1, 20));
  app.add_flag("--smoke", o.smoke, "small sizes and one run: checks that the driver works");
  app.add_flag("--json", json, "print the JSON records on stdout");
  app.add_option("--out", out, "append JSON records to this file ('' = none)");
  app.add_option("--lateness-data", o.plot_data, "write the lateness samples (ms, cumulative fraction) of the last run here");
  CLI11_PARSE(app, argc, argv);
  if (o.smoke) o.runs = 1;

  utsname host{};
  uname(&host);
  const Json machine{{"cores", std::thread::hardware_concurrency()},
                     {"cpu", dueq::testing::command_output("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'")},
                     {"kernel", host.release}};
  // The commit and build type compiled into this binary: the bench may be
  // started from any directory, or from a tree that has moved on since.
  const Json versions{{"dueq", build_commit()},
                      {"build_type", build_type()},
                      {"redis", dueq::testing::command_output("redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-")}};

  int failures = 0;
  for (const auto& s : scenarios()) {
    const std::string name = s.name;
    if (scenario != name && (scenario != "all" || !s.in_all)) continue;
    fmt::print(stderr, "== {} ({} run{})\n", name, o.runs, o.runs > 1 ? "s" : "");
    std::map<std::string, std::vector<double>> samples;
    Json table = Json::array();
    const int64_t scenario_start = wall_ms();
    for (int run = 0; run < o.runs; ++run) try {
      for (const auto& [k, v] : s.run(o, table)) samples[k].push_back(v);
    } catch (const std::exception& e) {
      fmt::print(stderr, "{} failed: {}\n", name, e.what());
      samples.clear();
      break;
    }
    if (samples.empty()) {
      ++failures;
      continue;
    }
    Json figures, spread;
    for (const auto& [k, v] : samples) {
      figures[k] = median(v);
      spread[k] = {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
    }
    if (name == "throughput") o.max_steady = figures["steady_jobs_per_s"].get<double>();
    Json record{{"scenario", name}, {"parameters", {{"runs", o.runs}, {"smoke", o.smoke}}}, {"figures", figures},
                {"spread", spread}, {"versions", versions}, {"machine", machine}, {"time_ms", wall_ms()}};
    if (!table.empty()) record["table"] = table;
    std::string line = fmt::format("{} ({:.0f} s):", name, static_cast<double>(wall_ms() - scenario_start) / 1000.0);
    for (const auto& [k, v] : figures.items()) line += fmt::format(" {}={:.4g}", k, v.get<double>());
    fmt::print("{}\n", line);
    if (json) fmt::print("{}\n", record.dump());
    if (!out.empty()) {
      std::ofstream file(out, std::ios::app);
      if (!file) {
        fmt::print(stderr, "cannot append to {}\n", out);
        ++failures;
      }
      file << record.dump() << "\n";
    }
  }
  return failures == 0 ? 0 : 1;
}

