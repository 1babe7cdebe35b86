#include "policy/adam.h"

#include <cmath>

#include "common/byte_codec.h"

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
  const double scale = cfg_.grad_clip > 0 && norm > cfg_.grad_clip ? cfg_.grad_clip / norm : 1.0;
  ++t_;
  const double b1 = cfg_.beta1, b2 = cfg_.beta2;
  const double c1 = 1.0 - std::pow(b1, double(t_)), c2 = 1.0 - std::pow(b2, double(t_));
  const double lr = cfg_.learning_rate * std::sqrt(c2) / c1;
  for (size_t i = 0; i < params.size(); ++i) {
    const double g = grads[i] * scale;
    m_[i] = float(b1 * m_[i] + (1 - b1) * g);
    v_[i] = float(b2 * v_[i] + (1 - b2) * g * g);
    params[i] -= float(lr * m_[i] / (std::sqrt(double(v_[i])) + cfg_.eps));
  }
  return norm;
}

namespace {
constexpr char kMagic[8] = {'M', 'O', 'E', 'R', 'L', 'A', 'D', 'M'};
constexpr size_t kHeaderBytes = sizeof kMagic + 8 + 8;  // magic, steps, n
}  // namespace

std::string adam::serialize() const {
  byte_writer w;
  w.raw(kMagic, sizeof kMagic);
  w.u64(static_cast<uint64_t>(t_));
  w.u64(m_.size());
  w.f32s(m_.data(), m_.size());
  w.f32s(v_.data(), v_.size());
  return std::move(w.bytes());
}

status adam::load(const std::string& bytes) {
  if (bytes.size() < kHeaderBytes || bytes.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0)
    return error{errc::malformed_message, "optimiser state: does not start with MOERLADM"};
  byte_reader r(bytes.data() + sizeof kMagic, bytes.size() - sizeof kMagic);
  const uint64_t steps = r.u64(), n = r.u64();
  if (n != m_.size())
    return error{errc::invalid_argument, "optimiser state: holds " + std::to_string(n) +
                                             " moments, this model has " +
                                             std::to_string(m_.size()) + " parameters"};
  if (bytes.size() != kHeaderBytes + 2 * n * sizeof(float))
    return error{errc::malformed_message, "optimiser state: " + std::to_string(bytes.size()) +
                                              " bytes, expected " +
                                              std::to_string(kHeaderBytes + 2 * n * sizeof(float))};
  r.f32s(m_.data(), m_.size());
  r.f32s(v_.data(), v_.size());
  t_ = static_cast<int64_t>(steps);
  return ok_status();
}

}  // namespace moerl::policy
