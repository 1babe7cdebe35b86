// Private to the policy's Adam (policy/adam.cpp) and its CUDA twin (policy/cuda/adam.cu): the
// update arithmetic written once, so that the two cannot drift apart. The per-parameter step
// is a host+device function; the twin's library is compiled with -fmad=false so nvcc does not
// fuse its multiply-adds into FMAs the CPU build (x86-64 without -mfma) never makes, and each
// element then rounds exactly as on the CPU.
#pragma once

#if !defined(MOERL_INSIDE_moerl_policy) && !defined(MOERL_INSIDE_moerl_policy_cuda)
#error \
    "policy/internal/adam_update.h is private to moerl_policy and moerl_policy_cuda (policy/): include policy/adam.h"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "policy/adam.h"

#if defined(__CUDACC__)
#define MOERL_ADAM_HOST_DEVICE __host__ __device__
#else
#define MOERL_ADAM_HOST_DEVICE
#endif

namespace moerl::policy::detail {

// What one step needs besides the gradient: decays, the bias-corrected learning rate of step
// t (1-based, counted after the increment) and the clipping factor of the gradient.
struct adam_step_coeffs {
  double beta1, beta2, lr, eps, grad_scale;
};

// Global-norm clipping: the factor the gradient is multiplied by (1 when it is within
// grad_clip, or clipping is off).
inline double adam_clip_scale(const adam_config& cfg, double grad_norm) {
  return cfg.grad_clip > 0 && grad_norm > cfg.grad_clip ? cfg.grad_clip / grad_norm : 1.0;
}

inline adam_step_coeffs adam_coeffs(const adam_config& cfg, int64_t t, double grad_scale) {
  const double b1 = cfg.beta1, b2 = cfg.beta2;
  const double c1 = 1.0 - std::pow(b1, double(t)), c2 = 1.0 - std::pow(b2, double(t));
  return {b1, b2, cfg.learning_rate * std::sqrt(c2) / c1, cfg.eps, grad_scale};
}

// adam::load's refusal of moments saved for another parameter count (CPU and CUDA alike).
inline status check_adam_state_size(const adam_state& state, size_t num_params) {
  if (state.m.size() == num_params) return ok_status();
  return error{errc::invalid_argument, "optimiser state: holds " + std::to_string(state.m.size()) +
                                           " moments, this model has " +
                                           std::to_string(num_params) + " parameters"};
}

// One parameter: moments in double, stored as fp32; the parameter moves by the rounded step.
MOERL_ADAM_HOST_DEVICE inline void adam_update_one(const adam_step_coeffs& c, float grad, float& m,
                                                   float& v, float& param) {
  const double g = grad * c.grad_scale;
  m = float(c.beta1 * m + (1 - c.beta1) * g);
  v = float(c.beta2 * v + (1 - c.beta2) * g * g);
  param -= float(c.lr * m / (sqrt(double(v)) + c.eps));
}

}  // namespace moerl::policy::detail
