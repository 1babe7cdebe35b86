// The policy's CUDA twins (policy/cuda/) where no GPU is needed: argument checks happen on the
// host before any CUDA call, and a missing device is an error value. A separate suite from
// cuda_twins_test.cpp because that one is reported as skipped without a GPU (CTest's
// SKIP_REGULAR_EXPRESSION), which would hide a failure here; this one runs everywhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/kernels_cuda.h"
#include "policy/adam.h"
#include "policy/cuda/adam_cuda.h"
#include "policy/cuda/dense_ops_cuda.h"
#include "policy/cuda/device_expert_exchange.h"
#include "policy/cuda/model_cuda.h"
#include "policy/expert_exchange.h"

namespace moerl::policy {
namespace {

// Checked on the host before any CUDA call: runs with or without a GPU.
TEST(policy_cuda_host_checks, bad_shapes_are_refused_on_the_host_naming_function_and_argument) {
  auto expect_refused = [](status st, const std::string& words) {
    ASSERT_FALSE(st.ok()) << words;
    EXPECT_EQ(st.err().code, errc::invalid_argument) << st.err().to_string();
    EXPECT_NE(st.err().message.find(words), std::string::npos) << st.err().message;
  };
  float* none = nullptr;
  expect_refused(cuda::linear_forward(nullptr, none, none, -1, 4, 4, none),
                 "cuda::linear_forward: n = -1");
  expect_refused(cuda::linear_forward(nullptr, none, none, 2, 4, 4, none),
                 "cuda::linear_forward: x is null but holds 8 elements");
  expect_refused(
      cuda::linear_backward(nullptr, none, none, none, 1, int64_t(1) << 40, 1, none, none),
      "cuda::linear_backward: d_in = 1099511627776 is outside 0..2147483647");
  expect_refused(cuda::rmsnorm_backward(nullptr, none, none, none, none, 3, -2, none, none),
                 "cuda::rmsnorm_backward: d = -2");
  expect_refused(cuda::attention_forward(nullptr, none, 1, 4, 0, 8, none, none),
                 "cuda::attention_forward: num_heads 0 < 1");
  expect_refused(cuda::attention_backward(nullptr, none, none, none, 1, 4, 2, 8, none),
                 "cuda::attention_backward: qkv is null");
  expect_refused(cuda::attention_decode(nullptr, none, none, none, 2, 8, 8, 2, 4, none),
                 "cuda::attention_decode: pos 8 is outside the cache's 0..7");
  expect_refused(cuda::log_softmax_row(nullptr, none, 4, 0.0f, none),
                 "cuda::log_softmax_row: temperature");
  // A null pointer for a tensor that holds data is refused even when nothing is computed.
  expect_refused(cuda::rmsnorm_forward(nullptr, none, none, 0, 16, none, none),
                 "cuda::rmsnorm_forward: g is null but holds 16 elements");
  // Nothing to do is not an error and touches no device (the weights' pointer is never read
  // for zero rows): empty shapes return ok anywhere.
  float weights[16] = {};
  EXPECT_TRUE(cuda::linear_forward(nullptr, none, weights, 0, 4, 4, none).ok());
  EXPECT_TRUE(cuda::attention_forward(nullptr, none, 0, 4, 2, 8, none, none).ok());
  EXPECT_TRUE(cuda::rmsnorm_forward(nullptr, none, weights, 0, 16, none, none).ok());
  EXPECT_TRUE(cuda::log_softmax_row(nullptr, none, 0, 1.0f, none).ok());
  expect_refused(cuda::embed_forward(nullptr, none, none, nullptr, 4, 0, 0, 8, none),
                 "cuda::embed_forward: t 0 < 1");
  expect_refused(cuda::embed_backward(nullptr, nullptr, none, 4, 2, 8, none, none),
                 "cuda::embed_backward: tokens is null but holds 4 elements");
  expect_refused(cuda::add_inplace(nullptr, none, none, -3), "cuda::add_inplace: n = -3");
}

// The device policy refuses what it cannot build before it touches a device, naming it: an
// expert-parallel rank without a device exchange or with one of another group, and a bad config
// (the CPU policy's own check, with its key).
TEST(policy_cuda_host_checks, device_policy_refuses_mismatched_exchanges_and_bad_configs) {
  model_config cfg;
  auto two = make_inprocess_expert_group(2);
  auto three = make_inprocess_expert_group(3);
  auto refused = [](const result<std::unique_ptr<cuda::moe_policy>>& r, const std::string& words) {
    ASSERT_FALSE(r.ok()) << words;
    EXPECT_EQ(r.err().code, errc::invalid_argument) << r.err().to_string();
    EXPECT_NE(r.err().message.find(words), std::string::npos) << r.err().message;
  };
  refused(cuda::moe_policy::create(cfg, *two[0], nullptr),
          "the device exchange is missing beside the rank's host exchange (rank 0 of 2)");
  refused(cuda::moe_policy::create(cfg, *two[1], cuda::make_host_staged_exchange(*three[1])),
          "of another group than the rank's host exchange (rank 1 of 2)");
  // Experts that do not split over the ranks: the CPU policy's check, before the device.
  auto uneven =
      cuda::moe_policy::create(cfg, *three[0], cuda::make_host_staged_exchange(*three[0]));
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.err().code, errc::cuda_error) << uneven.err().to_string();
  cfg.num_heads = 5;  // does not divide d_model 64
  auto bad = cuda::moe_policy::create(cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().code, errc::invalid_config);
  EXPECT_NE(bad.err().message.find("policy.num_heads"), std::string::npos) << bad.err().message;
}

// Without a device, a good config fails as a value naming the CUDA call (no crash, no CPU
// fallback). With a GPU the test returns at once (see below).
TEST(policy_cuda_host_checks, without_a_gpu_the_device_policy_fails_with_cuda_error) {
  if (kernels::cuda::device_available()) return;
  auto pol = cuda::moe_policy::create(model_config{});
  ASSERT_FALSE(pol.ok());
  EXPECT_EQ(pol.err().code, errc::cuda_error) << pol.err().to_string();
  EXPECT_NE(pol.err().message.find("cudaStreamCreateWithFlags"), std::string::npos)
      << pol.err().message;
}

// Without a device, creating the optimiser's device state fails as a value naming the CUDA
// call; it does not crash. With a GPU there is nothing to refuse and the test returns at once
// (not a skip: bench/gpu_check.sh counts a skip there as a GPU that was not seen).
TEST(policy_cuda_host_checks, without_a_gpu_adam_create_fails_with_cuda_error_naming_the_call) {
  if (kernels::cuda::device_available()) return;
  auto gpu = cuda::adam::create(adam_config{}, 10);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.err().code, errc::cuda_error);
  EXPECT_NE(gpu.err().message.find("cudaMalloc"), std::string::npos) << gpu.err().message;
}

}  // namespace
}  // namespace moerl::policy
