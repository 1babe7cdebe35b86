#include "common/temp_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace moerl {

result<std::unique_ptr<temp_dir>> temp_dir::create(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/moerl-" + tag + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    return error(errc::io_error, "mkdtemp(" + tmpl + "): " + std::strerror(errno));
  return std::unique_ptr<temp_dir>(new temp_dir(tmpl));
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace moerl
