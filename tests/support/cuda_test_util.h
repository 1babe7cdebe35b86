// Helpers of the CUDA-twin suites (tests/kernels/cuda_twins_test.cpp,
// tests/policy/cuda_twins_test.cpp): a skip when no GPU is visible, device copies of host
// vectors, and the tolerance check every twin comparison uses.
#pragma once

#ifndef MOERL_TEST_CODE
#error \
    "tests/support/cuda_test_util.h is test code: production code (benches too) must not include tests/"
#endif

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda/kernels_cuda.h"

// Skips the test, with the reason CTest's SKIP_REGULAR_EXPRESSION matches, without a GPU.
#define MOERL_REQUIRE_GPU(what)                                             \
  do {                                                                      \
    if (!::moerl::kernels::cuda::device_available())                        \
      GTEST_SKIP() << "no CUDA device visible: " << what << " not checked"; \
  } while (0)

namespace moerl::testing {

// A device copy of a host vector (or zeroed storage), copied back with host().
template <class T>
class dev {
 public:
  explicit dev(size_t n) : n_(n) {
    if (n_) {
      EXPECT_EQ(cudaMalloc(&p_, n_ * sizeof(T)), cudaSuccess);
      EXPECT_EQ(cudaMemset(p_, 0, n_ * sizeof(T)), cudaSuccess);
    }
  }
  explicit dev(const std::vector<T>& h) : dev(h.size()) {
    if (n_) {
      EXPECT_EQ(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~dev() {
    if (p_) cudaFree(p_);
  }
  dev(const dev&) = delete;
  dev& operator=(const dev&) = delete;
  T* get() const { return p_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_) {
      EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// |gpu - cpu| <= rtol * (|cpu| + max|cpu|) element by element: a relative tolerance that an
// element near zero measures against the tensor's scale.
inline void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double rtol,
                         const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double scale = 0;
  for (float v : cpu) scale = std::max(scale, std::fabs(double(v)));
  for (size_t i = 0; i < cpu.size(); ++i)
    ASSERT_LE(std::fabs(double(gpu[i]) - cpu[i]), rtol * (std::fabs(double(cpu[i])) + scale))
        << what << " at " << i << ": gpu " << gpu[i] << ", cpu " << cpu[i];
}

}  // namespace moerl::testing
