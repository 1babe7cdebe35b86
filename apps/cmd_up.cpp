// `moerl up`: a whole local cluster on this machine, one process per node on loopback, that
// runs the configured iterations of the job, prints progress, writes the run report and shuts
// down. The README's first command; it must end on its own. This file parses the command line
// and prints; what the run does is up/up_run.h.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/up_progress.h"
#include "up/pod_policy.h"
#include "up/up_run.h"

namespace moerl::apps {
namespace {

// `j[key]` when it is a number, else `otherwise` (a report's NaN is null, and value() throws
// on a null).
double number_or(const nlohmann::json& j, const char* key, double otherwise) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : otherwise;
}

// The end of a run in the order a user reads it: how far it got, how well it learned, how
// fast, whether anything was lost or counted twice; then what happened to its nodes.
std::string end_summary(const nlohmann::json& report, uint64_t iterations) {
  using nlohmann::json;
  const json acct = report.value("accounting", json::object());
  const json curve = report.value("reward_curve", json::array());
  const json its = report.value("iterations", json::array());
  char buf[512];
  std::string out = "iteration " + std::to_string(report.value("policy_version", uint64_t{0})) +
                    (iterations > 0 ? "/" + std::to_string(iterations) : "");
  if (!curve.empty()) {
    // The mean of the last (up to) 10 iterations' rewards, as one is noisy (a NaN reward is
    // null in JSON: skipped).
    double sum = 0;
    size_t n = 0;
    for (size_t i = curve.size() > 10 ? curve.size() - 10 : 0; i < curve.size(); ++i)
      if (const json r = curve[i].value("mean_reward", json()); r.is_number()) {
        sum += r.get<double>();
        ++n;
      }
    std::snprintf(buf, sizeof buf, ", reward %.3f over the last %zu (random %.3f, max %.1f)",
                  n ? sum / double(n) : 0.0, n, number_or(report, "reward_random", 0.0),
                  number_or(report, "reward_max", 1.0));
    out += buf;
  }
  // Samples trained per second between the first and the last iteration's end that the
  // report's timings hold (start-up excluded; the page's figure too). The timings may be a
  // tail of the run and the curve may miss iterations: they are matched by number.
  if (its.size() > 1) {
    const double first = number_or(its.front(), "iteration", 0);
    const double last = number_or(its.back(), "iteration", 0);
    double samples = 0;
    for (const auto& p : curve) {
      const double i = number_or(p, "iteration", -1);
      if (i > first && i <= last) samples += number_or(p, "samples", 0.0);
    }
    const double s =
        (number_or(its.back(), "end_unix_ms", 0.0) - number_or(its.front(), "end_unix_ms", 0.0)) /
        1000.0;
    if (s > 0 && samples > 0) {
      std::snprintf(buf, sizeof buf, ", %.0f samples/s", samples / s);
      out += buf;
    }
  }
  uint64_t dropped = 0;
  const json by_reason = acct.value("dropped", json::object());  // items() refers to it
  for (const auto& [reason, count] : by_reason.items())
    if (count.is_number_unsigned()) dropped += count.get<uint64_t>();
  std::snprintf(buf, sizeof buf, ", lost %lu, dup %lu, dropped %lu, invariant %s",
                static_cast<unsigned long>(acct.value("lost", uint64_t{0})),
                static_cast<unsigned long>(acct.value("duplicated", uint64_t{0})),
                static_cast<unsigned long>(dropped),
                acct.value("invariant_ok", false) ? "holds" : "BROKEN");
  out += buf;
  const size_t replaced = report.value("replacements", json::array()).size();
  const size_t interrupted = report.value("interruptions", json::array()).size();
  out += "; " + std::to_string(interrupted) + " interruption(s), " + std::to_string(replaced) +
         " node(s) replaced";
  return out;
}

// What the job does to its nodes, in the words of `moerl up`'s output; its progress on the
// display (in place on a terminal).
up::job_events printed_events(up_progress& display) {
  up::job_events ev;
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
  ev.replaced = [&display](const up::replacement_record& r) {
    const std::string what = r.replacement == r.node
                                 ? "recreated " + r.node
                                 : "replaced " + r.node + " by " + r.replacement;
    display.message("moerl up: >>> " + what + " (" + r.role + ", " +
                    up::controller_name(up::controller_of(r.role)) + ")" +
                    (r.error.empty() ? "" : " FAILED: " + r.error) +
                    (r.moved.empty() ? ""
                                     : "; its console address was taken while it was down: now " +
                                           r.moved + " (moved)"));
  };
  return ev;
}

int run_up(const up::up_options& a) {
  using nlohmann::json;
  auto prepared = up::up_run::prepare(a);
  if (!prepared) {
    const error& e = prepared.err();
    if (e.code == errc::invalid_config) {
      std::cerr << "moerl up: invalid configuration: " << e.message << "\n";
      return 2;
    }
    std::cerr << "moerl up: " << (e.code == errc::not_found ? e.message : e.to_string()) << "\n";
    return e.code == errc::not_found ? 2 : 1;
  }
  up::up_run& run = **prepared;
  if (!run.resumed_from().empty())
    std::printf("moerl up: resuming from the last committed checkpoint of %s\n",
                run.resumed_from().c_str());
  std::printf("moerl up: run %s: coordinator + %zu nodes on loopback; logs in %s\n",
              run.run_id().c_str(), run.num_nodes(), run.log_dir().c_str());
  if (auto st = run.start(); !st) {
    std::cerr << "moerl up: " << st.err().to_string() << "\n";
    return 1;
  }
  auto& j = run.job();
  // Where to look first: the dashboard, then the consoles for scripts.
  if (!j.http_address().empty())
    std::printf("moerl up: dashboard at %s://%s/#token=%s (API /api/v1/, metrics /metrics)\n",
                j.node_config().get_string("console.tls_cert").empty() ? "http" : "https",
                j.http_address().c_str(),
                j.node_config().get_string("console.operator_token").c_str());
  std::printf(
      "moerl up: coordinator at %s, console at %s (try: moerl console --connect %s nodes)\n",
      j.coordinator_join().c_str(), j.console_address().c_str(), j.console_address().c_str());
  std::fflush(stdout);
  // On a terminal the progress line is redrawn in place; in a log, a line per iteration and
  // one at least every 5 s.
  up_progress display(stdout, ::isatty(::fileno(stdout)) == 1, std::chrono::seconds(5));
  const up::up_result out = run.run(printed_events(display));
  const bool done = out.outcome == up::run_outcome::done;
  if (out.outcome == up::run_outcome::failed)
    std::fprintf(stderr, "moerl up: the job cannot go on: %s\n", j.failure().c_str());
  if (done) display.settled(out.report);
  display.finish();
  if (!out.trace_path.empty())
    std::printf("moerl up: trace in %s (open it in https://ui.perfetto.dev)\n",
                out.trace_path.c_str());
  if (!out.trace_error.empty()) std::cerr << "moerl up: --trace: " << out.trace_error << "\n";
  if (!out.stop_error.empty()) std::cerr << "moerl up: " << out.stop_error << "\n";
  const char* how = done                                     ? "finished"
                    : out.outcome == up::run_outcome::failed ? "FAILED"
                                                             : "TIMED OUT";
  std::printf("moerl up: %s after %.1f s: %s\n", how, out.report["wall_s"].get<double>(),
              end_summary(out.report, display.last().iterations).c_str());
  if (!out.html_path.empty()) {
    const std::string run_dir = out.html_path.substr(0, out.html_path.find_last_of('/') + 1);
    std::printf(
        "moerl up: report in %s (open it in a browser; its data: %s; draw it again, or "
        "beside another run: moerl report %s [OTHER_RUN_DIR])\n",
        out.html_path.c_str(), out.report_path.c_str(), run_dir.empty() ? "." : run_dir.c_str());
  } else {
    std::printf("moerl up: report in %s\n", out.report_path.c_str());
    std::cerr << "moerl up: report.html not written: " << out.html_error << "\n";
  }
  if (!j.failure_cause().empty())
    std::printf("moerl up: cause: %s gave up: %s\n", out.report.value("failed_node", "").c_str(),
                j.failure_cause().c_str());
  return out.clean() ? 0 : 1;
}

}  // namespace

void add_up_command(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "up", "start a whole local cluster (one process per node on loopback) and run it");
  static up::up_options a;
  static bool no_interrupt = false;
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
  cmd->add_flag("--no-interrupt", no_interrupt,
                "do not inject the default mid-run Spot interruption into a rollout node");
  cmd->add_flag("--resume", a.resume,
                "continue from the newest committed checkpoint of an earlier run in the store");
  cmd->callback([] {
    a.spot_interruption = !no_interrupt;
    int rc = run_up(a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace moerl::apps
