// `moerl up`: a whole local cluster on this machine, one process per node on loopback, that
// runs the configured iterations of the test work, prints progress, writes the run report
// and shuts down. The README's first command; it must end on its own.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/local_cluster.h"
#include "apps/commands.h"
#include "common/config.h"
#include "provenance/provenance.h"

namespace moerl::apps {
namespace {

struct up_args {
  std::string config_file, console, report, run_dir = "moerl-runs";
  std::vector<std::string> overrides;
  int iterations = 0;
  int timeout_s = 300;
};

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, n) : std::string("moerl");
}

int run_up(const up_args& a) {
  using nlohmann::json;
  auto t0 = std::chrono::steady_clock::now();
  std::string run_id = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::system_clock::now().time_since_epoch()).count()) +
                       "-" + std::to_string(::getpid());
  actors::cluster_options o;
  o.binary = self_exe();
  o.config_file = a.config_file;
  o.overrides = a.overrides;
  // Every run gets its own ledger journal in the store, so a run never resumes another's.
  o.overrides.push_back("ledger.store_prefix=runs/" + run_id + "/ledger");
  if (a.iterations > 0) o.overrides.push_back("actors.iterations=" + std::to_string(a.iterations));
  o.console = a.console;
  o.log_dir = a.run_dir + "/" + run_id + "/logs";
  o.nodes = actors::default_cluster_nodes();
  auto cfg = config::load(o.config_file, o.overrides);
  if (!cfg) {
    std::cerr << "moerl up: invalid configuration: " << cfg.err().message << "\n";
    return 2;
  }
  std::printf("moerl up: run %s: coordinator + %zu nodes on loopback; logs in %s\n", run_id.c_str(), o.nodes.size(),
              o.log_dir.c_str());
  auto cluster = actors::local_cluster::start(o);
  if (!cluster) {
    std::cerr << "moerl up: " << cluster.err().to_string() << "\n";
    return 1;
  }
  auto& c = **cluster;
  std::printf("moerl up: coordinator at %s, console at %s (try: moerl console --connect %s nodes)\n",
              c.coordinator_join().c_str(), c.console_address().c_str(), c.console_address().c_str());
  std::fflush(stdout);
  bool done = false;
  std::string last_line;
  auto deadline = t0 + std::chrono::seconds(a.timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& [name, st] : c.exited())
      if (name == "coordinator") {
        std::cerr << "moerl up: the coordinator exited (status " << st << "); see its log\n";
        return 1;
      }
    auto s = c.console("status", {}, {}, 2000);
    if (s) {
      auto acct = (*s)["accounting"];
      char line[512];
      std::snprintf(line, sizeof line,
                    "iteration %lu/%lu  units %lu  queue %lu  leases %lu  dispatched %lu  committed %lu  trained %lu  "
                    "lost %lu  duplicated %lu  invariant %s",
                    s->value("iteration", 0ul), s->value("iterations", 0ul), s->value("units", 0ul),
                    s->value("queue_depth", 0ul), s->value("leases", 0ul), acct.value("dispatched", 0ul),
                    acct.value("committed", 0ul), acct.value("trained", 0ul), acct.value("lost", 0ul),
                    acct.value("duplicated", 0ul), s->value("invariant_ok", false) ? "ok" : "BROKEN");
      if (line != last_line) {
        std::printf("moerl up: %s\n", line);
        std::fflush(stdout);
        last_line = line;
      }
      if (s->value("done", false)) {
        done = true;
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // progress print period
  }
  auto report = c.console("report", {}, {}, 5000);
  json out = report ? *report : json{{"error", report.err().to_string()}};
  out["run_id"] = run_id;
  out["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out["provenance"] = collect_provenance();
  auto stopped = c.stop(15000);
  if (!stopped) std::cerr << "moerl up: " << stopped.err().message << "\n";
  std::string path = a.report.empty() ? a.run_dir + "/" + run_id + "/report.json" : a.report;
  std::ofstream(path) << out.dump(2) << "\n";
  auto acct = out.value("accounting", json::object());
  std::printf("moerl up: %s after %.1f s; accounting %s; report in %s\n", done ? "finished" : "TIMED OUT",
              out["wall_s"].get<double>(), acct.dump().c_str(), path.c_str());
  bool clean = done && acct.value("lost", 1ul) == 0 && acct.value("duplicated", 1ul) == 0 &&
               acct.value("invariant_ok", false);
  return clean ? 0 : 1;
}

}  // namespace

void add_up_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("up", "start a whole local cluster (one process per node on loopback) and run it");
  static up_args a;
  cmd->add_option("--config", a.config_file, "YAML config file");
  cmd->add_option("--set", a.overrides, "override key=value (repeatable)")->allow_extra_args(false);
  cmd->add_option("--iterations", a.iterations, "policy iterations to run (default: actors.iterations)");
  cmd->add_option("--console", a.console, "console address (default: console.address, tcp://127.0.0.1:7411)");
  cmd->add_option("--report", a.report, "write the run report JSON here (default: <run dir>/report.json)");
  cmd->add_option("--run-dir", a.run_dir, "where run logs and reports go");
  cmd->add_option("--timeout", a.timeout_s, "give up after this many seconds");
  cmd->callback([] {
    int rc = run_up(a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace moerl::apps
