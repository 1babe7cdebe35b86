#include "policy/adam.h"

#include <cmath>
#include <cstring>

namespace moerl::policy {

result<adam_config> adam_config::from_config(const config& c) {
  adam_config a;
  a.learning_rate = c.get_double("policy.learning_rate");
  a.beta1 = c.get_double("policy.adam_beta1");
  a.beta2 = c.get_double("policy.adam_beta2");
  a.grad_clip = c.get_double("policy.grad_clip");
  if (!(a.learning_rate > 0)) return error{errc::invalid_config, "key 'policy.learning_rate': must be > 0"};
  if (!(a.beta1 >= 0 && a.beta1 < 1)) return error{errc::invalid_config, "key 'policy.adam_beta1': must be in [0, 1)"};
  if (!(a.beta2 >= 0 && a.beta2 < 1)) return error{errc::invalid_config, "key 'policy.adam_beta2': must be in [0, 1)"};
  if (!(a.grad_clip >= 0)) return error{errc::invalid_config, "key 'policy.grad_clip': must be >= 0"};
  return a;
}

adam::adam(const adam_config& cfg, size_t n) : cfg_(cfg), m_(n, 0.0f), v_(n, 0.0f) {}

result<double> adam::step(std::vector<float>& params, const std::vector<float>& grads) {
  if (params.size() != m_.size() || grads.size() != m_.size())
    return error{errc::invalid_argument, "adam: " + std::to_string(params.size()) +
                                             " params / " + std::to_string(grads.size()) +
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

std::string adam::serialize() const {
  std::string out("MOERLADM", 8);
  const uint64_t steps = static_cast<uint64_t>(t_), n = m_.size();
  out.append(reinterpret_cast<const char*>(&steps), 8);
  out.append(reinterpret_cast<const char*>(&n), 8);
  out.append(reinterpret_cast<const char*>(m_.data()), n * sizeof(float));
  out.append(reinterpret_cast<const char*>(v_.data()), n * sizeof(float));
  return out;
}

status adam::load(const std::string& bytes) {
  if (bytes.size() < 24 || bytes.compare(0, 8, "MOERLADM") != 0)
    return error{errc::malformed_message, "optimiser state: does not start with MOERLADM"};
  uint64_t steps = 0, n = 0;
  std::memcpy(&steps, bytes.data() + 8, 8);
  std::memcpy(&n, bytes.data() + 16, 8);
  if (n != m_.size())
    return error{errc::invalid_argument, "optimiser state: holds " + std::to_string(n) +
                                             " moments, this model has " +
                                             std::to_string(m_.size()) + " parameters"};
  if (bytes.size() != 24 + 2 * n * sizeof(float))
    return error{errc::malformed_message, "optimiser state: " + std::to_string(bytes.size()) +
                                              " bytes, expected " +
                                              std::to_string(24 + 2 * n * sizeof(float))};
  std::memcpy(m_.data(), bytes.data() + 24, n * sizeof(float));
  std::memcpy(v_.data(), bytes.data() + 24 + n * sizeof(float), n * sizeof(float));
  t_ = static_cast<int64_t>(steps);
  return ok_status();
}

}  // namespace moerl::policy
