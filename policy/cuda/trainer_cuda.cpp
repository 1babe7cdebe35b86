// The device policy's side of policy/internal/grpo_step.h: its forward state, a device gradient
// and policy/cuda's Adam over the device parameters.
#include "policy/cuda/trainer_cuda.h"

#include "policy/cuda/adam_cuda.h"
#include "policy/internal/grpo_step.h"

namespace moerl::policy::detail {

template <>
struct policy_traits<cuda::moe_policy> {
  using state = cuda::forward_state;
  using grads = cuda::device_buffer<float>;
  using optimizer = cuda::adam;
  static status zero_grads(cuda::moe_policy& p, grads* g) {
    return g->assign_zero(p.num_params(), p.stream());
  }
  static result<std::unique_ptr<cuda::adam>> make_optimizer(const adam_config& c,
                                                            cuda::moe_policy& p) {
    return cuda::adam::create(c, p.num_params());
  }
  static result<double> step(cuda::adam& opt, cuda::moe_policy& p, grads& g) {
    return opt.step(p.stream(), p.params_device(), g.get());
  }
  static result<std::shared_ptr<cuda::moe_policy>> frozen_copy(cuda::moe_policy& p) {
    ASSIGN_OR_RETURN(auto ref, cuda::moe_policy::create(p.cfg()));
    STATUS_TRY(ref->copy_params_from(p));
    return std::shared_ptr<cuda::moe_policy>(std::move(ref));
  }
};

}  // namespace moerl::policy::detail

namespace moerl::policy::cuda {

result<update_stats> grpo_gradient(moe_policy& policy, const std::vector<sample>& samples,
                                   const std::vector<double>& advantages, const grpo_config& cfg,
                                   float temperature, moe_policy* ref,
                                   device_buffer<float>* grads) {
  return detail::grpo_gradient_t(policy, samples, advantages, cfg, temperature, ref, grads);
}

result<std::vector<iteration_stats>> train_single_process(
    moe_policy& policy, const task& t, const reward_model& rm, const train_config& cfg,
    const std::function<bool(const iteration_stats&)>& on_iteration) {
  return detail::train_single_process_t(policy, t, rm, cfg, on_iteration);
}

}  // namespace moerl::policy::cuda
