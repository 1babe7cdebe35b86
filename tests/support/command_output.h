// Runs a shell command and returns what it wrote on stdout, with its wait status in *rc: the
// bench smoke tests run `moerl bench ...` as a user would and read its JSON.
#pragma once

#ifndef MOERL_TEST_CODE
#error \
    "tests/support/command_output.h is test code: production code (benches too) must not include tests/"
#endif

#include <cstdio>
#include <string>

namespace moerl::testing {

inline std::string command_output(const std::string& cmd, int* rc) {
  std::string out;
  *rc = -1;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  *rc = ::pclose(p);
  return out;
}

}  // namespace moerl::testing
