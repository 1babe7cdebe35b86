// The dashboard's files (console/web/), compiled into the binary by console/CMakeLists.txt
// (cmake/EmbedFiles.cmake writes them as byte arrays), so the page needs no network.
#pragma once

#ifndef MOERL_INSIDE_moerl_console
#error \
    "console/internal/web_assets.h is private to moerl_console (console/): include its public headers"
#endif

#include <cstddef>
#include <string>

namespace moerl::console {

struct web_asset {
  const char* path;          // URL path: "/" for index.html, else "/<file name>"
  const char* content_type;  // from the file's extension
  const unsigned char* data;
  size_t size;
};

// The asset served at `path`, or nullptr.
const web_asset* find_web_asset(const std::string& path);

}  // namespace moerl::console
