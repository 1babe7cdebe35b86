// The run report page's files (report/web/), compiled into the binary by report/CMakeLists.txt
// (cmake/EmbedFiles.cmake writes them as byte arrays), so report.html can be written with no
// file beside the binary.
#pragma once

#ifndef MOERL_INSIDE_moerl_report
#error \
    "report/internal/report_assets.h is private to moerl_report (report/): include report/report_html.h"
#endif

#include <cstddef>
#include <string>

namespace moerl::report {

struct web_asset {
  const char* path;          // "/<file name>" (report.html, report.js, report.css)
  const char* content_type;  // from the file's extension
  const unsigned char* data;
  size_t size;
};

// The asset named `path`, or nullptr.
const web_asset* find_report_asset(const std::string& path);

}  // namespace moerl::report
