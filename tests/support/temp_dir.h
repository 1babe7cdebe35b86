// A fresh directory under $TMPDIR (or /tmp) per test, removed afterwards; the one scratch
// directory every test uses (tests/support/ holds what several test folders share).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace moerl::testing {

class temp_dir {
 public:
  // `tag` names the directory (moerl-<tag>-XXXXXX) so a leftover says which test made it.
  explicit temp_dir(const std::string& tag = "test") {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/moerl-" + tag + "-XXXXXX";
    char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) std::abort();  // no scratch space: nothing below can run
    path_ = made;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace moerl::testing
