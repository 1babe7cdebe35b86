// `moerl up`: a whole local cluster on this machine, one process per node on loopback, that
// runs the configured iterations of the test work, prints progress, writes the run report
// and shuts down. The README's first command; it must end on its own.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>

#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/chrome_trace.h"
#include "actors/http_console.h"
#include "actors/local_job.h"
#include "apps/commands.h"
#include "apps/up_progress.h"
#include "common/child_process.h"
#include "common/config.h"
#include "job/grpo_job.h"
#include "provenance/provenance.h"
#include "store/checkpoint.h"
#include "store/object_store.h"

namespace moerl::apps {
namespace {

struct up_args {
  std::string config_file, console, report, trace, run_dir = "moerl-runs";
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
    if (pos == std::string::npos || k.size() < 10 ||
        k.compare(k.size() - 10, 10, "/COMMITTED") != 0)
      continue;
    std::string prefix = k.substr(0, pos + 4);
    if (prefix > best && store::latest_committed(**st, job::checkpoint_prefix(prefix)))
      best = prefix;
  }
  return best;
}

// The run's id: the unix time in seconds (so a sorted listing of runs is chronological),
// then this process's pid.
std::string new_run_id() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + "-" +
         std::to_string(::getpid());
}

// What the job does to its nodes, in the words of `moerl up`'s output; its progress on the
// display (in place on a terminal).
actors::job_events printed_events(up_progress& display) {
  actors::job_events ev;
  ev.polled = [&display](const nlohmann::json& status, const nlohmann::json& job_stats) {
    display.update(status, job_stats);
  };
  ev.spot_notice = [&display](const std::string& node, int deadline_s, const status& sent) {
    display.message("moerl up: >>> injected a Spot interruption notice into " + node +
                    " (deadline " + std::to_string(deadline_s) + " s)" +
                    (sent ? "" : " FAILED: " + sent.err().to_string()) +
                    "; disable with --no-interrupt");
  };
  ev.exited = [&display](const std::string& node, const std::string& cause,
                         std::chrono::milliseconds delay) {
    char after[32];
    std::snprintf(after, sizeof after, "%.1f", static_cast<double>(delay.count()) / 1000.0);
    display.message("moerl up: >>> " + node + " exited (" + cause +
                    "); its replacement starts in " + after + " s");
  };
  ev.killed_dead = [&display](const std::string& node, const std::string& why) {
    display.message("moerl up: >>> " + node +
                    " still ran after the coordinator declared it dead (" + why + "); killed");
  };
  ev.replaced = [&display](const actors::replacement_record& r) {
    const std::string what = r.replacement == r.node
                                 ? "recreated " + r.node
                                 : "replaced " + r.node + " by " + r.replacement;
    display.message("moerl up: >>> " + what + " (" + r.role + ", " +
                    actors::controller_name(actors::controller_of(r.role)) + ")" +
                    (r.error.empty() ? "" : " FAILED: " + r.error) +
                    (r.moved.empty() ? ""
                                     : "; its console address was taken while it was down: now " +
                                           r.moved + " (moved)"));
  };
  return ev;
}

// `moerl up` runs its GRPO trainer as kUpTrainerMembers node processes unless the config file or
// an override sets trainer.group_size. A group of N > 1 holds job.trainer_ep_ranks = 1 rank per
// member unless that is set too, so the group's EP step has as many ranks as members. Returns
// the number of trainer nodes to start. 2 (trainer-0 and trainer-1, one trainer group): since a
// step's answer round carries the members' shares and moments (job/ep_trainer.cpp), a group
// step with its publication and checkpoint costs about what the one-process trainer's does,
// and the run is bound by generation on the 2 shared cores (README, "The main job").
constexpr uint32_t kUpTrainerMembers = 2;

// Whether the config file (already validated by config::load) or an override sets `key`,
// even to its default: a section path (trainer: group_size:) or a dotted key at any level.
bool config_names(const std::string& config_file, const std::vector<std::string>& overrides,
                  const std::string& key) {
  for (const auto& o : overrides)
    if (o.rfind(key + "=", 0) == 0) return true;
  if (config_file.empty()) return false;
  std::function<bool(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& n,
                                                                        const std::string& at) {
    if (!n.IsMap()) return false;
    for (const auto& entry : n) {
      const std::string k = (at.empty() ? "" : at + ".") + entry.first.as<std::string>();
      if (k == key || (key.rfind(k + ".", 0) == 0 && walk(entry.second, k))) return true;
    }
    return false;
  };
  try {
    return walk(YAML::LoadFile(config_file), "");
  } catch (const YAML::Exception&) {
    return false;  // config::load read it; unreadable now: as if unset
  }
}

uint32_t default_trainer_members(const config& pre, const std::string& config_file,
                                 std::vector<std::string>& overrides) {
  auto named = [&](const std::string& key) { return config_names(config_file, overrides, key); };
  if (pre.get_string("job.kind") != "grpo")
    return static_cast<uint32_t>(pre.get_int("trainer.group_size"));
  auto members = static_cast<uint32_t>(pre.get_int("trainer.group_size"));
  if (!named("trainer.group_size")) {
    members = kUpTrainerMembers;
    overrides.insert(overrides.begin(), "trainer.group_size=" + std::to_string(members));
  }
  if (members <= 1) return members;
  if (!named("job.trainer_ep_ranks")) overrides.insert(overrides.begin(), "job.trainer_ep_ranks=1");
  return members;
}

// `moerl up` runs its two rollout nodes as one rollout EP group across node processes
// (rollout.group_size = 2, one rank each: the model sharded over rollout-0 and rollout-1) unless
// the config file or an override sets rollout.group_size, or the task is multi-turn (one rank).
// Measured back to back on the shared 2-core machine (load 18-30): the default run reached a
// 10-iteration mean reward of 0.9 at iteration 338, 267 s in, against 353 / 242 s with every
// rollout node its own in-process EP instance (actors/RUNTIME.md, "Rollout groups across nodes").
constexpr uint32_t kUpRolloutMembers = 2;

void default_rollout_group(const config& pre, const std::string& config_file,
                           std::vector<std::string>& overrides) {
  auto named = [&](const std::string& key) { return config_names(config_file, overrides, key); };
  if (pre.get_string("job.kind") != "grpo" || pre.get_string("task.name") == "guess" ||
      named("rollout.group_size"))
    return;
  overrides.insert(overrides.begin(), "rollout.group_size=" + std::to_string(kUpRolloutMembers));
  if (!named("job.rollout_ep_ranks")) overrides.insert(overrides.begin(), "job.rollout_ep_ranks=1");
}

int run_up(const up_args& a) {
  using nlohmann::json;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string run_id = new_run_id();
  actors::local_job_options o;
  uint32_t trainer_members = 1;
  o.config_file = a.config_file;
  o.overrides = a.overrides;
  o.store_prefix = "runs/" + run_id;
  {
    auto pre = config::load(a.config_file, a.overrides);
    if (!pre) {
      std::cerr << "moerl up: invalid configuration: " << pre.err().message << "\n";
      return 2;
    }
    // The coordinator would refuse these too, but only in its log: say it here.
    if (auto st = actors::check_http_console_config(*pre); !st) {
      std::cerr << "moerl up: invalid configuration: " << st.err().message << "\n";
      return 2;
    }
    // A GRPO run's length is grpo.iterations unless --iterations says otherwise.
    o.iterations = a.iterations;
    if (o.iterations <= 0 && pre->get_string("job.kind") == "grpo") {
      o.iterations = pre->get_int("grpo.iterations");
    }
    trainer_members = default_trainer_members(*pre, a.config_file, o.overrides);
    default_rollout_group(*pre, a.config_file, o.overrides);
    if (a.resume) {
      auto from = latest_resumable_run(*pre);
      if (!from) {
        std::cerr << "moerl up: --resume: " << from.err().to_string() << "\n";
        return 1;
      }
      if (from->empty()) {
        std::cerr << "moerl up: --resume: no earlier run has a committed checkpoint in "
                  << pre->get_string("store.url") << "\n";
        return 2;
      }
      std::printf("moerl up: resuming from the last committed checkpoint of %s\n", from->c_str());
      o.overrides.push_back("job.resume_from=" + *from);
    }
  }
  o.console = a.console;
  o.log_dir = a.run_dir + "/" + run_id + "/logs";
  o.one_blas_thread_per_node = true;
  o.nodes = actors::default_cluster_nodes(trainer_members);
  const size_t num_nodes = o.nodes.size();
  const std::string log_dir = o.log_dir;
  auto job = actors::local_job::configure(std::move(o));
  if (!job) {
    std::cerr << "moerl up: invalid configuration: " << job.err().message << "\n";
    return 2;
  }
  std::printf("moerl up: run %s: coordinator + %zu nodes on loopback; logs in %s\n", run_id.c_str(),
              num_nodes, log_dir.c_str());
  auto& j = **job;
  if (auto st = j.start(); !st) {
    std::cerr << "moerl up: " << st.err().to_string() << "\n";
    return 1;
  }
  std::printf(
      "moerl up: coordinator at %s, console at %s (try: moerl console --connect %s nodes)\n",
      j.coordinator_join().c_str(), j.console_address().c_str(), j.console_address().c_str());
  if (!j.http_address().empty())
    std::printf("moerl up: dashboard at %s://%s/#token=%s (API /api/v1/, metrics /metrics)\n",
                j.node_config().get_string("console.tls_cert").empty() ? "http" : "https",
                j.http_address().c_str(),
                j.node_config().get_string("console.operator_token").c_str());
  std::fflush(stdout);
  actors::run_policy policy;
  policy.deadline = t0 + std::chrono::seconds(a.timeout_s);
  policy.spot_interruption = !a.no_interrupt;
  // On a terminal the progress line is redrawn in place; in a log, a line per iteration and
  // one at least every 5 s.
  up_progress display(stdout, ::isatty(::fileno(stdout)) == 1, std::chrono::seconds(5));
  const actors::run_outcome ran = j.run(policy, printed_events(display));
  const bool done = ran == actors::run_outcome::done;
  if (ran == actors::run_outcome::failed) {
    std::fprintf(stderr, "moerl up: the job cannot go on: %s\n", j.failure().c_str());
  }
  json out = j.settled_report(done);
  if (done) display.settled(out);
  display.finish();
  if (!a.trace.empty()) {
    // The same trace /api/v1/trace serves, from the coordinator's snapshot view.
    auto snap = j.cluster().console("snapshot", {}, {}, 5000);
    if (snap) {
      std::ofstream(a.trace) << actors::chrome_trace(*snap).dump() << "\n";
      std::printf("moerl up: trace in %s (open it in https://ui.perfetto.dev)\n", a.trace.c_str());
    } else {
      std::cerr << "moerl up: --trace: " << snap.err().to_string() << "\n";
    }
  }
  out["run_id"] = run_id;
  out["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out["provenance"] = collect_provenance();
  // A failed run has nothing left to finish: its nodes get less time to stop.
  auto stopped = j.stop(ran == actors::run_outcome::failed ? 5000 : 15000);
  if (!stopped) std::cerr << "moerl up: " << stopped.err().message << "\n";
  std::string path = a.report.empty() ? a.run_dir + "/" + run_id + "/report.json" : a.report;
  std::ofstream(path) << out.dump(2) << "\n";
  auto acct = out.value("accounting", json::object());
  const char* how = done ? "finished" : ran == actors::run_outcome::failed ? "FAILED" : "TIMED OUT";
  std::printf("moerl up: %s after %.1f s; %zu node(s) replaced; accounting %s; report in %s\n", how,
              out["wall_s"].get<double>(), out.value("replacements", json::array()).size(),
              acct.dump().c_str(), path.c_str());
  if (!j.failure_cause().empty())
    std::printf("moerl up: cause: %s gave up: %s\n", out.value("failed_node", "").c_str(),
                j.failure_cause().c_str());
  bool clean = done && acct.value("lost", 1ul) == 0 && acct.value("duplicated", 1ul) == 0 &&
               acct.value("invariant_ok", false);
  return clean ? 0 : 1;
}

}  // namespace

void add_up_command(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "up", "start a whole local cluster (one process per node on loopback) and run it");
  static up_args a;
  cmd->add_option("--config", a.config_file, "YAML config file");
  cmd->add_option("--set", a.overrides, "override key=value (repeatable)")->allow_extra_args(false);
  cmd->add_option("--iterations", a.iterations,
                  "policy iterations to run (default: actors.iterations)");
  cmd->add_option("--console", a.console,
                  "console address (default: console.address, tcp://127.0.0.1:7411)");
  cmd->add_option("--report", a.report,
                  "write the run report JSON here (default: <run dir>/report.json)");
  cmd->add_option("--run-dir", a.run_dir, "where run logs and reports go");
  cmd->add_option("--trace", a.trace,
                  "write the iterations as Chrome trace JSON (Perfetto) here at the end");
  cmd->add_option("--timeout", a.timeout_s, "give up after this many seconds");
  cmd->add_flag("--no-interrupt", a.no_interrupt,
                "do not inject the default mid-run Spot interruption into a rollout node");
  cmd->add_flag("--resume", a.resume,
                "continue from the newest committed checkpoint of an earlier run in the store");
  cmd->callback([] {
    int rc = run_up(a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace moerl::apps
