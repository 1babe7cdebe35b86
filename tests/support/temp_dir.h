// A fresh directory per test, removed afterwards (common/temp_dir.h); a test without scratch
// space cannot run, so failing to make one aborts instead of returning an error.
#pragma once

#ifndef MOERL_TEST_CODE
#error \
    "tests/support/temp_dir.h is test code: production code (benches too) must not include tests/"
#endif

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/temp_dir.h"

namespace moerl::testing {

class temp_dir {
 public:
  explicit temp_dir(const std::string& tag = "test") {
    auto made = moerl::temp_dir::create(tag);
    if (!made) {
      std::fprintf(stderr, "%s\n", made.err().to_string().c_str());
      std::abort();
    }
    dir_ = std::move(*made);
  }
  const std::string& path() const { return dir_->path(); }

 private:
  std::unique_ptr<moerl::temp_dir> dir_;
};

}  // namespace moerl::testing
