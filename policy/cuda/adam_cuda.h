// CUDA twin of policy/adam.h's optimiser: Adam with bias correction and global-norm clipping
// over a flat device buffer of parameters, with its moments in device memory. The same
// configuration, update arithmetic (policy/internal/adam_update.h, shared with the CPU), step
// count and MOERLADM checkpoint bytes as the CPU's adam; read policy/adam.h for the contract.
// Differences: the gradient's squared norm is summed in double in a fixed tree order rather
// than the CPU's index order (equal to ~1e-16 relative, so the clipping factor is the same to
// double precision), and step() synchronises `stream` once, to read the norm: the decisions
// that depend on it (skip a non-finite step, clip) are taken on the host as on the CPU. With
// the same gradient norm, every parameter and moment rounds as on the CPU.
// Built only when MOERL_HAVE_CUDA (library moerl_policy_cuda).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/error.h"
#include "policy/adam.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace moerl::policy::cuda {

class adam {
 public:
  // Allocates zeroed moments for num_params parameters on the current device; errc::cuda_error
  // naming the call when that fails.
  static result<std::unique_ptr<adam>> create(const adam_config& cfg, size_t num_params);
  ~adam();
  adam(const adam&) = delete;
  adam& operator=(const adam&) = delete;

  // params[num_params] -= update(grads[num_params]) (device pointers); returns the gradient's
  // global norm before clipping. errc::invalid_argument when a pointer is null or the gradient
  // is not finite (the step is skipped: parameters, moments and the step count untouched).
  // Not safe to call concurrently on one optimiser.
  result<double> step(cudaStream_t stream, float* params, const float* grads);
  // The same step when the gradient's global norm is known (an expert-parallel trainer rank:
  // job/ep_trainer.h reduces it over the group): clipping and the non-finite check use `norm`
  // in place of this gradient's own norm.
  status step_with_norm(cudaStream_t stream, float* params, const float* grads, double norm);
  // sum of x[i]^2 over n device floats, in double, in step()'s fixed tree order (synchronises
  // `stream`; uses this optimiser's scratch, so not concurrently with its steps).
  result<double> squared_norm(cudaStream_t stream, const float* x, size_t n);
  int64_t num_steps() const { return t_; }
  size_t num_params() const { return n_; }
  const adam_config& cfg() const { return cfg_; }

  // The MOERLADM bytes of policy/adam.h (moments copied to the host on `stream`).
  result<std::string> serialize(cudaStream_t stream) const;
  // As adam::load: malformed bytes -> errc::malformed_message, another parameter count ->
  // errc::invalid_argument, and the state is left untouched.
  status load(cudaStream_t stream, const std::string& bytes);

 private:
  adam(const adam_config& cfg, size_t n) : cfg_(cfg), n_(n) {}
  adam_config cfg_;
  size_t n_;
  float* m_ = nullptr;       // device, n_
  float* v_ = nullptr;       // device, n_
  double* sumsq_ = nullptr;  // device: per-block partial sums of squares, then the total
  int64_t t_ = 0;
};

}  // namespace moerl::policy::cuda
