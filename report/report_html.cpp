#include "report/report_html.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "report/internal/report_assets.h"

namespace moerl::report {
namespace {

using nlohmann::json;

std::string asset_text(const char* name) {
  const web_asset* a = find_report_asset(name);
  // The three files are compiled in by report/CMakeLists.txt: a missing one is a build bug.
  if (!a) return {};
  return std::string(reinterpret_cast<const char*>(a->data), a->size);
}

// `text` with the first `marker` replaced by `with` (the template's markers are ours: each
// appears once).
std::string replace_marker(std::string text, const std::string& marker, const std::string& with) {
  const auto at = text.find(marker);
  if (at != std::string::npos) text.replace(at, marker.size(), with);
  return text;
}

// The runs as JSON that can sit inside <script> as it is: '<' only occurs inside JSON
// strings, where \u003c means the same character, so no "</script>" in a report (a node name,
// an error message) can end the element early.
std::string inline_json(const std::vector<run_report>& runs) {
  json arr = json::array();
  for (const auto& r : runs) arr.push_back({{"source", r.source}, {"report", r.report}});
  const std::string raw = arr.dump();
  std::string out;
  out.reserve(raw.size());
  for (char c : raw) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
  return out;
}

}  // namespace

result<run_report> load_run_report(const std::string& path) {
  std::string file = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    file = path + (path.empty() || path.back() == '/' ? "" : "/") + "report.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int e = errno;
    return error(e == ENOENT ? errc::not_found : errc::io_error,
                 file + ": cannot read the run report (" + std::strerror(e) + ")");
  }
  std::stringstream buf;
  buf << in.rdbuf();
  json report = json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded())
    return error(errc::invalid_argument,
                 file + ": not JSON (a run report is the report.json `moerl up` writes)");
  if (!report.is_object() || !report.contains("accounting"))
    return error(errc::invalid_argument,
                 file + ": JSON but not a run report (no \"accounting\"; `moerl up` writes one)");
  return run_report{file, std::move(report)};
}

result<std::string> render_report_html(const std::vector<run_report>& runs) {
  if (runs.empty()) return error(errc::invalid_argument, "no run report to render");
  std::string page = asset_text("/report.html");
  page = replace_marker(page, "<!--moerl:style-->",
                        "<style>\n" + asset_text("/report.css") + "</style>");
  page = replace_marker(
      page, "<!--moerl:data-->",
      "<script type=\"application/json\" id=\"moerl-runs\">" + inline_json(runs) + "</script>");
  page = replace_marker(page, "<!--moerl:script-->",
                        "<script>\n" + asset_text("/report.js") + "</script>");
  return page;
}

status write_report_html(const std::vector<run_report>& runs, const std::string& out_path) {
  auto page = render_report_html(runs);
  if (!page) return page.err();
  const std::string tmp = out_path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return error(errc::io_error, out_path + ": cannot write (" + std::strerror(errno) + ")");
    out << *page;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return error(errc::io_error, out_path + ": write failed (" + std::strerror(errno) + ")");
    }
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return error(errc::io_error, out_path + ": cannot write (" + std::strerror(e) + ")");
  }
  return ok_status();
}

}  // namespace moerl::report
