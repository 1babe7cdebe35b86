#include "policy/adam.h"

#include <cmath>

#include "common/byte_codec.h"
#include "common/status_try.h"
#include "policy/internal/adam_update.h"

namespace moerl::policy {

result<adam_config> adam_config::from_config(const config& c) {
  adam_config a;
  a.learning_rate = c.get_double("policy.learning_rate");
  a.beta1 = c.get_double("policy.adam_beta1");
  a.beta2 = c.get_double("policy.adam_beta2");
  a.grad_clip = c.get_double("policy.grad_clip");
  if (!(a.learning_rate > 0))
    return error{errc::invalid_config, "key 'policy.learning_rate': must be > 0"};
  if (!(a.beta1 >= 0 && a.beta1 < 1))
    return error{errc::invalid_config, "key 'policy.adam_beta1': must be in [0, 1)"};
  if (!(a.beta2 >= 0 && a.beta2 < 1))
    return error{errc::invalid_config, "key 'policy.adam_beta2': must be in [0, 1)"};
  if (!(a.grad_clip >= 0))
    return error{errc::invalid_config, "key 'policy.grad_clip': must be >= 0"};
  return a;
}

adam::adam(const adam_config& cfg, size_t n) : cfg_(cfg), m_(n, 0.0f), v_(n, 0.0f) {}

result<double> adam::step(std::vector<float>& params, const std::vector<float>& grads) {
  if (params.size() != m_.size() || grads.size() != m_.size())
    return error{errc::invalid_argument, "adam: " + std::to_string(params.size()) + " params / " +
                                             std::to_string(grads.size()) +
                                             " grads, optimiser built for " +
                                             std::to_string(m_.size())};
  double sq = 0;
  for (float g : grads) sq += double(g) * g;
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm))
    return error{errc::invalid_argument, "adam: gradient is not finite; step skipped"};
  ++t_;
  const detail::adam_step_coeffs c =
      detail::adam_coeffs(cfg_, t_, detail::adam_clip_scale(cfg_, norm));
  for (size_t i = 0; i < params.size(); ++i)
    detail::adam_update_one(c, grads[i], m_[i], v_[i], params[i]);
  return norm;
}

namespace {
constexpr char kMagic[8] = {'M', 'O', 'E', 'R', 'L', 'A', 'D', 'M'};
}  // namespace

std::string write_adam_state(uint64_t steps, const std::vector<float>& m,
                             const std::vector<float>& v) {
  byte_writer w;
  w.raw(kMagic, sizeof kMagic);
  w.u64(steps);
  w.u64(m.size());
  w.f32s(m.data(), m.size());
  w.f32s(v.data(), v.size());
  return std::move(w.bytes());
}

result<adam_state> read_adam_state(const std::string& bytes) {
  byte_reader r(bytes.data(), bytes.size());
  if (r.raw(sizeof kMagic) != std::string(kMagic, sizeof kMagic))
    return error{errc::malformed_message, "optimiser state: does not start with MOERLADM"};
  adam_state s;
  s.steps = r.u64();
  const uint64_t n = r.u64();
  // n * 8 is compared only once n is known to fit what is left: a damaged count must not
  // wrap around into a plausible size.
  if (!r.ok() || n > r.remaining() / 8 || r.remaining() != n * 8)
    return error{errc::malformed_message,
                 "optimiser state: " + std::to_string(bytes.size()) + " bytes do not hold " +
                     (r.ok() ? "2 x " + std::to_string(n) + " moments" : "its header")};
  s.m.resize(n);
  s.v.resize(n);
  r.f32s(s.m.data(), n);
  r.f32s(s.v.data(), n);
  return s;
}

std::string adam::serialize() const { return write_adam_state(uint64_t(t_), m_, v_); }

status adam::load(const std::string& bytes) {
  ASSIGN_OR_RETURN(adam_state state, read_adam_state(bytes));
  if (auto st = detail::check_adam_state_size(state, m_.size()); !st) return st;
  m_ = std::move(state.m);
  v_ = std::move(state.v);
  t_ = static_cast<int64_t>(state.steps);
  return ok_status();
}

}  // namespace moerl::policy
