// `moerl up`: a whole local cluster on this machine, one process per node on loopback, that
// runs the configured iterations of the test work, prints progress, writes the run report
// and shuts down. The README's first command; it must end on its own.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/local_cluster.h"
#include "apps/commands.h"
#include "common/config.h"
#include "job/grpo_job.h"
#include "provenance/provenance.h"
#include "store/checkpoint.h"
#include "store/object_store.h"

namespace moerl::apps {
namespace {

struct up_args {
  std::string config_file, console, report, run_dir = "moerl-runs";
  std::vector<std::string> overrides;
  int iterations = 0;
  int timeout_s = 900;
  bool no_interrupt = false;  // skip the default mid-run Spot interruption
  bool resume = false;        // continue from the newest committed checkpoint of an earlier run
};

// The job.store_prefix of the newest earlier run with a committed checkpoint ("" if none).
// Run ids start with the unix time in seconds, so the sorted listing is chronological.
result<std::string> latest_resumable_run(const config& cfg) {
  auto st = store::open_store(cfg.get_string("store.url"), cfg);
  if (!st) return st.err();
  auto keys = (*st)->list("runs/");
  if (!keys) return keys.err();
  std::string best;
  for (const auto& k : *keys) {
    auto pos = k.find("/job/checkpoints/");
    if (pos == std::string::npos || k.size() < 10 || k.compare(k.size() - 10, 10, "/COMMITTED") != 0) continue;
    std::string prefix = k.substr(0, pos + 4);
    if (prefix > best && store::latest_committed(**st, job::checkpoint_prefix(prefix))) best = prefix;
  }
  return best;
}

// The trainer's job figures (reward curve, timings) from the coordinator's node view.
// An empty object when there are none (the modpow test job reports no job figures), so
// callers can use value() on it.
nlohmann::json trainer_job_stats(const nlohmann::json& nodes) {
  if (!nodes.is_array()) return nlohmann::json::object();
  for (const auto& n : nodes)
    if (n.value("role", "") == "trainer" && n.contains("stats") && n["stats"].contains("job") &&
        n["stats"]["job"].is_object())
      return n["stats"]["job"];
  return nlohmann::json::object();
}

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
  // A local cluster runs every node process on this machine: one BLAS thread each keeps
  // them from oversubscribing the cores (an explicit OPENBLAS_NUM_THREADS wins).
  ::setenv("OPENBLAS_NUM_THREADS", "1", 0);
  actors::cluster_options o;
  o.binary = self_exe();
  o.config_file = a.config_file;
  o.overrides = a.overrides;
  // Every run gets its own ledger journal in the store, so a run never resumes another's.
  o.overrides.push_back("ledger.store_prefix=runs/" + run_id + "/ledger");
  o.overrides.push_back("job.store_prefix=runs/" + run_id + "/job");
  {
    auto pre = config::load(a.config_file, a.overrides);
    if (!pre) {
      std::cerr << "moerl up: invalid configuration: " << pre.err().message << "\n";
      return 2;
    }
    // A GRPO run's length is grpo.iterations unless --iterations says otherwise.
    int iterations = a.iterations;
    if (iterations <= 0 && pre->get_string("job.kind") == "grpo") iterations = static_cast<int>(pre->get_int("grpo.iterations"));
    if (iterations > 0) o.overrides.push_back("actors.iterations=" + std::to_string(iterations));
    if (a.resume) {
      auto from = latest_resumable_run(*pre);
      if (!from) {
        std::cerr << "moerl up: --resume: " << from.err().to_string() << "\n";
        return 1;
      }
      if (from->empty()) {
        std::cerr << "moerl up: --resume: no earlier run has a committed checkpoint in " << pre->get_string("store.url") << "\n";
        return 2;
      }
      std::printf("moerl up: resuming from the last committed checkpoint of %s\n", from->c_str());
      o.overrides.push_back("job.resume_from=" + *from);
    }
  }
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
  bool interrupted = a.no_interrupt;
  std::string interrupted_node;  // replaced once it has drained and exited
  std::chrono::steady_clock::time_point replace_at{};
  std::string last_line;
  nlohmann::json job_stats;
  auto last_progress = std::chrono::steady_clock::now();
  uint64_t last_trained = 0;
  auto deadline = t0 + std::chrono::seconds(a.timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& [name, st] : c.exited()) {
      // The Spot pool refills: a replacement rollout node joins a few seconds after the
      // interrupted one has drained and left.
      if (name == interrupted_node) {
        if (replace_at == std::chrono::steady_clock::time_point{}) {
          replace_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          std::printf("moerl up: >>> %s drained and exited (status %d); a replacement joins in 5 s\n", name.c_str(), st);
        } else if (std::chrono::steady_clock::now() >= replace_at) {
          auto r = c.restart(name);
          std::printf("moerl up: >>> replacement %s %s\n", name.c_str(), r ? "started" : ("FAILED: " + r.err().to_string()).c_str());
          interrupted_node.clear();
        }
      }
      if (name == "coordinator") {
        std::cerr << "moerl up: the coordinator exited (status " << st << "); see its log\n";
        return 1;
      }
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
      // The learning figures: the trainer's latest iteration, throughput since the last line.
      if (auto nodes = c.console("nodes", {}, {}, 2000)) {
        auto js = trainer_job_stats(*nodes);
        if (!js.is_null()) job_stats = js;
      }
      std::string learn;
      if (!job_stats.is_null() && !job_stats["reward_curve"].empty()) {
        const auto& last = job_stats["reward_curve"].back();
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_progress).count();
        const uint64_t trained = acct.value("trained", 0ul);
        char buf[256];
        std::snprintf(buf, sizeof buf, "  mean_reward %.3f (random %.3f, max %.1f)  samples/s %.0f  staleness %.2f",
                      last.value("mean_reward", 0.0), job_stats.value("reward_random", 0.0),
                      job_stats.value("reward_max", 1.0), dt > 0 ? double(trained - last_trained) / dt : 0.0,
                      last.value("staleness", 0.0));
        learn = buf;
        last_progress = std::chrono::steady_clock::now();
        last_trained = trained;
      }
      // One Spot interruption mid-run, as a rollout node on Spot capacity would get.
      if (!interrupted && s->value("iteration", 0ul) * 3 >= s->value("iterations", 0ul) && s->value("iteration", 0ul) > 0) {
        if (auto nodes = c.console("nodes", {}, {}, 2000)) {
          for (const auto& n : *nodes) {
            if (n.value("role", "") != "rollout" || n.value("state", "") != "running") continue;
            const std::string name = n.value("name", "");
            auto r = c.console("inject", {"spot", name}, {{"deadline", "20"}}, 3000);
            std::printf("moerl up: >>> injected a Spot interruption notice into %s (deadline 20 s)%s; disable with --no-interrupt\n",
                        name.c_str(), r ? "" : (" FAILED: " + r.err().to_string()).c_str());
            interrupted = true;
            if (r) interrupted_node = name;
            break;
          }
        }
      }
      if (line != last_line || !learn.empty()) {
        std::printf("moerl up: %s%s\n", line, learn.c_str());
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
  // "Done" means every committed group was handed to the trainer; the trainer may still hold
  // the last, short iteration until its flush (actors.trainer_flush_ms) steps on it, and its
  // stats arrive once a second after announcing a version. Wait for stats sent after done
  // that show nothing held and the coordinator's version, or the report misses the last step
  // (and a resume would start past the report's last version).
  const auto settled_from = std::chrono::steady_clock::now() + std::chrono::milliseconds(1200);
  const auto give_up = settled_from + std::chrono::milliseconds(cfg->get_int("actors.trainer_flush_ms") + 8000);
  auto report = c.console("report", {}, {}, 5000);
  auto trainer_settled = [&] {
    auto js = trainer_job_stats((*report)["nodes"]);
    if (js.is_null() || js.empty()) return true;  // a job without a learning step holds nothing
    return std::chrono::steady_clock::now() >= settled_from && js.value("pending_groups", 0ul) == 0 &&
           js.value("policy_version", 0ul) >= report->value("policy_version", 0ul);
  };
  while (done && report && !trainer_settled() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    report = c.console("report", {}, {}, 5000);
  }
  json out = report ? *report : json{{"error", report.err().to_string()}};
  if (report) {
    auto js = trainer_job_stats((*report)["nodes"]);
    if (!js.is_null()) {
      for (const char* k : {"task", "difficulty", "reward_random", "reward_max", "reward_curve", "iterations", "resumed_from_version"})
        if (js.contains(k)) out[k] = js[k];
      out["policy_iterations"] = out["iterations"].size();
    }
  }
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
  cmd->add_flag("--no-interrupt", a.no_interrupt, "do not inject the default mid-run Spot interruption into a rollout node");
  cmd->add_flag("--resume", a.resume, "continue from the newest committed checkpoint of an earlier run in the store");
  cmd->callback([] {
    int rc = run_up(a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace moerl::apps
