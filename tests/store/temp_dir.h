// A fresh directory under $TMPDIR (or /tmp) per test, removed afterwards.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace moerl::store::testing {

class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/moerl-store-test-XXXXXX";
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

}  // namespace moerl::store::testing
