// Adam (Kingma & Ba) with bias correction and optional global-norm gradient clipping, over
// a flat parameter buffer (params.h layout). Moments are part of a checkpoint's state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"

namespace moerl::policy {

struct adam_config {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double eps = 1e-8;
  double grad_clip = 1.0;  // max global L2 norm of the gradient; 0 = no clipping

  // From keys policy.learning_rate, policy.adam_beta1, policy.adam_beta2, policy.grad_clip.
  static result<adam_config> from_config(const config& cfg);
};

class adam {
 public:
  adam(const adam_config& cfg, size_t num_params);
  // params -= update(grads); returns the gradient's global norm before clipping.
  // errc::invalid_argument when sizes differ or the gradient is not finite (the step is
  // skipped, parameters untouched: one bad batch must not poison the weights).
  result<double> step(std::vector<float>& params, const std::vector<float>& grads);
  int64_t num_steps() const { return t_; }

  // Optimiser state for checkpoints: "MOERLADM" | u64 steps | u64 n | fp32 m[n] | fp32 v[n]
  // (little-endian). load() refuses bytes of another size or shape with
  // errc::malformed_message / errc::invalid_argument and leaves the state untouched.
  std::string serialize() const;
  status load(const std::string& bytes);
  const adam_config& cfg() const { return cfg_; }

 private:
  adam_config cfg_;
  std::vector<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace moerl::policy
