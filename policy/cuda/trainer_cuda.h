// GRPO on the device policy in one process (policy/trainer.h's train_single_process with the
// policy, its gradient and Adam's moments in device memory): the same iteration, written once
// in policy/internal/grpo_step.h; only where tensors live differs. What `moerl learn` runs
// with job.device=cuda. Built only when MOERL_HAVE_CUDA (library moerl_policy_cuda).
#pragma once

#include <functional>
#include <vector>

#include "common/error.h"
#include "policy/cuda/model_cuda.h"
#include "policy/trainer.h"

namespace moerl::policy::cuda {

// policy/trainer.h's grpo_gradient on the device policy (the same loss, packing and checks:
// grpo_step.h): grads is a device buffer, zeroed to num_params() first. What a trainer rank of
// job/ep_trainer.h runs with job.device=cuda.
result<update_stats> grpo_gradient(moe_policy& policy, const std::vector<sample>& samples,
                                   const std::vector<double>& advantages, const grpo_config& cfg,
                                   float temperature, moe_policy* ref, device_buffer<float>* grads);

result<std::vector<iteration_stats>> train_single_process(
    moe_policy& policy, const task& t, const reward_model& rm, const train_config& cfg,
    const std::function<bool(const iteration_stats&)>& on_iteration);

}  // namespace moerl::policy::cuda
