// `moerl report RUN_DIR [RUN_DIR...] [--out FILE]`: an earlier run's report.html, drawn again
// from its report.json (one run), or two runs side by side under a comparison. RUN_DIR is what
// `moerl up` printed ("report in DIR/report.json"): the directory or the file itself.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "report/report_html.h"

namespace moerl::apps {
namespace {

// Where the page goes when --out is not given: beside the one run's report.json, or (for a
// comparison, which belongs to no one run) in the current directory, named after the runs.
std::string default_out(const std::vector<report::run_report>& runs) {
  if (runs.size() == 1) {
    const std::string& src = runs[0].source;
    const auto slash = src.find_last_of('/');
    return (slash == std::string::npos ? std::string() : src.substr(0, slash + 1)) + "report.html";
  }
  std::string name = "compare";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i].report;
    std::string id = r.contains("run_id") && r["run_id"].is_string()
                         ? r["run_id"].get<std::string>()
                         : "run" + std::to_string(i + 1);
    for (char& c : id)
      if (c == '/' || c == ' ') c = '_';
    name += "-" + id;
  }
  return name + ".html";
}

int run_report(const std::vector<std::string>& dirs, const std::string& out) {
  std::vector<report::run_report> runs;
  for (const auto& d : dirs) {
    auto r = report::load_run_report(d);
    if (!r) {
      std::cerr << "moerl report: " << r.err().message << "\n";
      return 2;
    }
    runs.push_back(std::move(*r));
  }
  const std::string path = out.empty() ? default_out(runs) : out;
  if (auto st = report::write_report_html(runs, path); !st) {
    std::cerr << "moerl report: " << st.err().message << "\n";
    return 1;
  }
  std::printf("moerl report: %s (open it in a browser; it needs no network)\n", path.c_str());
  return 0;
}

}  // namespace

void add_report_command(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "report", "draw a run's report.html from its report.json, or two runs side by side");
  static std::vector<std::string> dirs;
  static std::string out;
  cmd->add_option("RUN_DIR", dirs,
                  "a run directory (moerl-runs/<run id>) or its report.json; two or more are "
                  "compared side by side")
      ->required();
  cmd->add_option("--out,-o", out,
                  "write the page here (default: report.html beside the one run's report.json; "
                  "compare-<ids>.html here for several)");
  cmd->callback([] {
    int rc = run_report(dirs, out);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace moerl::apps
