// A fresh directory under $TMPDIR (or /tmp), removed with everything in it when the owner
// goes: the one scratch directory of benches that start clusters and of the tests
// (tests/support/temp_dir.h wraps it for tests, which cannot run without one).
#pragma once

#include <memory>
#include <string>

#include "common/error.h"

namespace moerl {

class temp_dir {
 public:
  // `tag` names the directory (moerl-<tag>-XXXXXX) so a leftover says who made it. An error
  // (errc::io_error) names the template and errno when mkdtemp fails.
  static result<std::unique_ptr<temp_dir>> create(const std::string& tag);
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit temp_dir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace moerl
