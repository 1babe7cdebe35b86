// Shared by the tests whose forked ranks use the GPU (device_transport_test, ep_device_test):
// a rank that finds no visible device exits with kNoDevice, and the test skips when every
// rank did (the parent never touches CUDA: a child of a process that initialised CUDA
// cannot use it).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>

#include "fabric/bootstrap.h"

namespace moerl::fabric::test {

constexpr int kNoDevice = 77;

inline void expect_ranks_passed(const result<launch_report>& report) {
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  if (std::all_of(report->exit_codes.begin(), report->exit_codes.end(),
                  [](int c) { return c == kNoDevice; }))
    GTEST_SKIP() << "no CUDA device visible (bench/gpu_check.sh runs this on a GPU)";
  for (size_t r = 0; r < report->exit_codes.size(); ++r)
    EXPECT_EQ(report->exit_codes[r], 0) << "rank " << r << " (see the rank's exit codes)";
}

}  // namespace moerl::fabric::test
