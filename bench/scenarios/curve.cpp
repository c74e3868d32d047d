#include "bench/scenarios.hpp"

#include <filesystem>
#include <fstream>

#include "common/curve.hpp"

namespace dueq::bench {

using namespace dueq::testing;

// Key files for a CURVE run: the broker's pair and one client pair per role
// (producer, worker, admin for the stats probes), on an allow-list that
// grants every queue.
class CurveKeys {
 public:
  CurveKeys() : dir_(make_temp_dir("bench-keys")) {
    std::ofstream allow(dir_ / "allow.toml");
    for (const char* name : {"broker", "producer", "worker", "admin"}) {
      auto pair = generate_curve_key_pair();
      if (!pair || !write_curve_key_files((dir_ / name).string(), *pair)) throw std::runtime_error("cannot write CURVE keys");
      if (std::string_view(name) != "broker")
        allow << "[[key]]\nname = \"" << name << "\"\npublic = \"" << pair->public_key << "\"\nrole = \"" << name
              << "\"\n" << (std::string_view(name) == "admin" ? "" : "queues = [\"*\"]\n");
    }
  }
  ~CurveKeys() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Link link() const {
    const std::string broker_pub = (dir_ / "broker.pub").string();
    auto client = [&](const char* name) { return ClientOptions{.broker_key = broker_pub, .key_file = key(name)}; };
    return Link{{"--curve-key", key("broker"), "--allow-list", (dir_ / "allow.toml").string()},
                client("producer"),
                client("admin"),
                {"--broker-key", broker_pub, "--key", key("worker")}};
  }

 private:
  std::string key(const char* name) const { return (dir_ / (std::string(name) + ".key")).string(); }
  std::filesystem::path dir_;
};

// The price of CurveZMQ: bulk and steady throughput (2 workers x 32) and
// enqueue-to-start latency at half the plaintext steady rate (1 worker x 64),
// each over plaintext and over CURVE in the same run.
Figures curve(const Options& o, Json& table) {
  const CurveKeys keys;
  Figures f;
  for (const bool encrypted : {false, true}) {
    const Link link = encrypted ? keys.link() : Link{};
    const std::string mode = encrypted ? "curve" : "plain";
    progress("curve: " + mode);
    Figures run = bulk_and_steady(o, 2, 32, link);
    f[mode + "_bulk_process_jobs_per_s"] = run["bulk_process_jobs_per_s"];
    f[mode + "_bulk_enqueue_jobs_per_s"] = run["bulk_enqueue_jobs_per_s"];
    f[mode + "_steady_jobs_per_s"] = run["steady_jobs_per_s"];
  }
  const double rate = f["plain_steady_jobs_per_s"] / 2;
  for (const bool encrypted : {false, true}) {
    const std::string mode = encrypted ? "curve" : "plain";
    Figures run = latency_run(o, rate, 1, 64, encrypted ? keys.link() : Link{});
    f[mode + "_half_load_p50_ms"] = run["p50_ms"];
    f[mode + "_half_load_p99_ms"] = run["p99_ms"];
    table.push_back({{"mode", mode}, {"rate_jobs_per_s", rate}, {"bulk_process_jobs_per_s", f[mode + "_bulk_process_jobs_per_s"]},
                     {"steady_jobs_per_s", f[mode + "_steady_jobs_per_s"]}, {"p50_ms", run["p50_ms"]}, {"p99_ms", run["p99_ms"]}});
  }
  f["half_load_rate_jobs_per_s"] = rate;
  f["ratio_bulk_process"] = f["curve_bulk_process_jobs_per_s"] / f["plain_bulk_process_jobs_per_s"];
  f["ratio_bulk_enqueue"] = f["curve_bulk_enqueue_jobs_per_s"] / f["plain_bulk_enqueue_jobs_per_s"];
  f["ratio_steady"] = f["curve_steady_jobs_per_s"] / f["plain_steady_jobs_per_s"];
  return f;
}

}  // namespace dueq::bench
