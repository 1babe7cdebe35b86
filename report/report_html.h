// The run report as a page: report.html, one self-contained file that shows a run's
// report.json (or two side by side) as plots and tables, drawn by the page's inline script
// into inline SVG. Nothing in it reaches the network, so it opens from a file, a mail or an
// artifact store as it is. `moerl up` writes it beside report.json; `moerl report` renders an
// earlier run's or compares two.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace moerl::report {

// One run to show: its report (report.json's content) and where it was read from (shown on
// the page, and the name an error gives).
struct run_report {
  std::string source;  // the report.json path
  nlohmann::json report;
};

// The report.json of `path`: a run directory holding report.json, or the file itself.
// Errors name the file: errc::not_found (no such file or directory), errc::io_error (cannot
// be read), errc::invalid_argument (not JSON, or JSON that is not a run report: an object
// with "accounting").
result<run_report> load_run_report(const std::string& path);

// The page for `runs` (one, or more side by side, in order). errc::invalid_argument when
// `runs` is empty.
result<std::string> render_report_html(const std::vector<run_report>& runs);

// render_report_html, written to `out_path` (replaced whole: written beside it, then renamed,
// so a reader never sees half a page). errc::io_error names the path.
status write_report_html(const std::vector<run_report>& runs, const std::string& out_path);

}  // namespace moerl::report
