// `moerl up` from its options to its report, without printing: how the default cluster is
// shaped (a 2-member trainer group and a 2-member rollout group unless the config says
// otherwise), which earlier run --resume continues, the run's id and directories, running the
// local job under its deadline and default Spot interruption, and the report it writes.
// apps/cmd_up.cpp parses the command line and prints what this returns.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "up/local_job.h"

namespace moerl::up {

struct up_options {
  std::string config_file;
  std::vector<std::string> overrides;  // key=value, as --set gives them
  std::string console;                 // console address; "" keeps console.address
  std::string report;                  // report path; "" is <run dir>/<run id>/report.json
  std::string run_dir = "moerl-runs";  // run logs and reports
  std::string trace;                   // Chrome trace path; "" writes none
  int iterations = 0;                  // > 0 overrides grpo.iterations / actors.iterations
  int timeout_s = 900;                 // give up after this long
  bool spot_interruption = true;       // inject the default mid-run Spot notice
  bool resume = false;  // continue from the newest committed checkpoint of an earlier run
};

// What a finished run leaves: the report (also written to report_path) and how it ended.
struct up_result {
  run_outcome outcome = run_outcome::failed;
  nlohmann::json report;
  std::string report_path;
  std::string html_path;    // report.html beside report_path, when written
  std::string html_error;   // why report.html was not written
  std::string trace_path;   // written, when asked for and the snapshot answered
  std::string trace_error;  // why the trace was not written, when asked for
  std::string stop_error;   // a node that did not stop in time, when any
  // A clean run: done, nothing lost or duplicated, the invariant held (exit code 0).
  bool clean() const;
};

class up_run {
 public:
  // Shapes the cluster and configures the job. Errors: errc::invalid_config (a bad config or
  // override), errc::not_found (--resume and no earlier run has a committed checkpoint), other
  // codes when the store cannot be read.
  static result<std::unique_ptr<up_run>> prepare(up_options options);

  const std::string& run_id() const { return run_id_; }
  const std::string& resumed_from() const { return resumed_from_; }  // "" unless --resume
  size_t num_nodes() const { return num_nodes_; }
  const std::string& log_dir() const { return log_dir_; }
  local_job& job() { return *job_; }

  // Starts every node (the coordinator first).
  status start();
  // Runs the job to its end, its deadline or a node that gave up, then stops the nodes and
  // writes the report (report.json, and report.html beside it: report/report_html.h).
  up_result run(job_events events);

 private:
  up_run() = default;
  up_options opts_;
  std::chrono::steady_clock::time_point t0_;
  std::string run_id_, resumed_from_, log_dir_;
  size_t num_nodes_ = 0;
  std::unique_ptr<local_job> job_;
};

}  // namespace moerl::up
