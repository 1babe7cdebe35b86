// moerl sim validate SCENARIO [--seed N] [--short] [--json]
// moerl sim run SCENARIO [--against HOST:PORT [--deliver-via CMD]] [--report FILE] [--json]
// [--short] [--seed N] Exit codes: 0 the scenario passed (validate: it is valid), 1 an invariant
// failed, 2 bad input (the scenario file or a flag), 3 the run could not be carried out.
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "provenance/provenance.h"
#include "sims/scenario.h"
#include "sims/sim_run.h"
#include "sims/timeline.h"

namespace moerl::apps {
namespace {

struct sim_flags {
  std::string scenario_path;
  std::string against;
  std::string deliver_via;
  std::string report_path;
  bool json = false;
  bool short_form = false;
  bool no_baseline = false;
  bool keep = false;
  int64_t seed = -1;
  std::string config_file;
  std::vector<std::string> overrides;
};

// Loads the scenario (with --short and --seed applied) or exits 2 naming the problem.
sims::scenario load_or_exit(const sim_flags& f) {
  auto s = sims::load_scenario(f.scenario_path);
  if (!s) {
    std::cerr << "moerl sim: invalid scenario: " << s.err().message << "\n";
    throw CLI::RuntimeError(2);
  }
  sims::scenario out = f.short_form ? sims::apply_short_form(*s) : *s;
  if (f.seed >= 0) out.seed = static_cast<uint64_t>(f.seed);
  return out;
}

void validate(const sim_flags& f) {
  const sims::scenario s = load_or_exit(f);
  // Expanding against the local cluster's node names also checks named nodes and counts.
  auto t = sims::expand(s, sims::canonical_roster(s.cluster));
  if (!t) {
    std::cerr << "moerl sim: invalid scenario: " << t.err().message << "\n";
    throw CLI::RuntimeError(2);
  }
  if (f.json) {
    std::cout << nlohmann::json{{"scenario", s.name},     {"seed", s.seed},
                                {"short", f.short_form},  {"duration_s", s.duration_s},
                                {"settle_s", s.settle_s}, {"timeline", sims::timeline_json(*t)}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << s.file << ": valid; scenario " << s.name << ", seed " << s.seed
            << (f.short_form ? ", short form" : "") << ", " << s.duration_s << " s + " << s.settle_s
            << " s settle, " << t->size() << " fault(s) on a local cluster:\n";
  for (const auto& e : *t) std::cout << "  " << sims::to_json(e).dump() << "\n";
}

void run(const sim_flags& f) {
  const sims::scenario s = load_or_exit(f);
  sims::run_options opts;
  opts.against = f.against;
  opts.deliver_via = f.deliver_via;
  opts.short_form = f.short_form;
  opts.baseline = !f.no_baseline;
  opts.config_file = f.config_file;
  opts.overrides = f.overrides;
  auto r = sims::run_scenario(s, opts);
  if (!r) {
    std::cerr << "moerl sim: " << r.err().to_string() << "\n";
    const bool bad_input =
        r.err().code == errc::invalid_config || r.err().code == errc::invalid_argument;
    throw CLI::RuntimeError(bad_input ? 2 : 3);
  }
  const auto verdicts = sims::evaluate_invariants(*r);
  const nlohmann::json report = sims::report_json(*r, verdicts, collect_provenance());
  if (!f.report_path.empty()) {
    std::ofstream out(f.report_path);
    out << report.dump(2) << "\n";
    if (!out) {
      std::cerr << "moerl sim: cannot write the report to " << f.report_path << "\n";
      throw CLI::RuntimeError(3);
    }
  }
  if (f.json) {
    std::cout << report.dump(2) << "\n";
  } else {
    std::cout << sims::human_summary(report);
  }
  const std::string verdict = report["verdict"];
  // A passing run's logs and ledger are not needed; a failing run's are the evidence.
  if (verdict != "fail" && !f.keep && !r->work_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(r->work_dir, ec);
  } else if (!r->work_dir.empty()) {
    std::cerr << "moerl sim: logs and ledger kept in " << r->work_dir << "\n";
  }
  if (verdict == "fail") throw CLI::RuntimeError(1);
}

}  // namespace

void add_sim_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("sim", "interruption simulations against a live job");
  cmd->require_subcommand(1);
  static sim_flags flags;

  auto* v = cmd->add_subcommand("validate", "check a scenario file and print its fault timeline");
  v->add_option("scenario", flags.scenario_path, "scenario YAML (sims/scenarios/*.yaml)")
      ->required();
  v->add_option("--seed", flags.seed, "override the scenario's seed");
  v->add_flag("--short", flags.short_form, "the CI form (short: section)");
  v->add_flag("--json", flags.json, "print the expanded timeline as JSON");
  v->callback([] { validate(flags); });

  auto* r = cmd->add_subcommand("run", "run a scenario and report what the faults cost");
  r->add_option("scenario", flags.scenario_path, "scenario YAML (sims/scenarios/*.yaml)")
      ->required();
  r->add_option(
      "--against", flags.against,
      "attach to a running job's console (HOST:PORT) instead of starting a local cluster");
  r->add_option("--deliver-via", flags.deliver_via,
                "with --against: the command that strikes and replaces nodes where they run "
                "(sims/fault_delivery.h; `scripts/pods.sh fault` for pods)");
  r->add_option("--report", flags.report_path, "also write the JSON report to this file");
  r->add_option("--seed", flags.seed, "override the scenario's seed");
  r->add_flag("--json", flags.json, "print the JSON report instead of the summary");
  r->add_flag("--short", flags.short_form, "the CI form (short: section)");
  r->add_flag("--no-baseline", flags.no_baseline, "skip the fault-free baseline run");
  r->add_flag("--keep", flags.keep, "keep the logs and ledger of a passing run too");
  r->add_option("--config", flags.config_file,
                "YAML config for the cluster's nodes (and console.token)");
  r->add_option("--set", flags.overrides,
                "config override key=value (repeatable), after the scenario's");
  r->callback([] { run(flags); });
}

}  // namespace moerl::apps
