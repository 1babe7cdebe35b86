// Adam (Kingma & Ba) with bias correction and optional global-norm gradient clipping, over
// a flat parameter buffer (params.h layout). Moments are part of a checkpoint's state. The
// CUDA twin over device buffers: policy/cuda/adam_cuda.h (the same update arithmetic,
// policy/internal/adam_update.h).
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

// Adam's checkpoint state, the MOERLADM format: "MOERLADM" | u64 steps | u64 n | fp32 m[n] |
// fp32 v[n], little-endian (common/byte_codec.h). adam::serialize/load and the trainer ranks'
// slicing (job/param_slicing.h) all read and write it through these two functions.
struct adam_state {
  uint64_t steps = 0;
  std::vector<float> m, v;  // first and second moments, one per parameter
};
// m and v must have the same size.
std::string write_adam_state(uint64_t steps, const std::vector<float>& m,
                             const std::vector<float>& v);
// errc::malformed_message when the bytes do not start with the magic or their size is not
// the header's plus 2 x n floats.
result<adam_state> read_adam_state(const std::string& bytes);

class adam {
 public:
  adam(const adam_config& cfg, size_t num_params);
  // params -= update(grads); returns the gradient's global norm before clipping.
  // errc::invalid_argument when sizes differ or the gradient is not finite (the step is
  // skipped, parameters untouched: one bad batch must not poison the weights).
  result<double> step(std::vector<float>& params, const std::vector<float>& grads);
  int64_t num_steps() const { return t_; }

  // Optimiser state for checkpoints in the MOERLADM format (write_adam_state above). load()
  // refuses malformed bytes with errc::malformed_message, moments for another parameter
  // count with errc::invalid_argument, and then leaves the state untouched.
  std::string serialize() const;
  status load(const std::string& bytes);
  const adam_config& cfg() const { return cfg_; }

 private:
  adam_config cfg_;
  std::vector<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace moerl::policy
