// One rank of job/ep_policy_group.h with job.device=cuda: its device policy
// (policy/cuda/model_cuda.h) and, for a trainer rank, its device gradient and Adam state, and
// the trainer step's device side (job/ep_trainer.h's step with the dense gradient all-reduce
// through NCCL on device buffers). This header names no CUDA type, so that ep_policy_group and
// ep_trainer compile the same with and without CUDA; a build without CUDA refuses create()
// with the reason (job/device.h refuses job.device=cuda before anything gets here).
//
// The seam where the expert plane on device memory plugs in: ep_device_rank.cpp's
// make_rank_device_exchange. Today it wraps the rank's host fabric_expert_exchange in
// policy::cuda::make_host_staged_exchange (device->host before dispatch, host->device after
// combine: device_expert_exchange.h); fabric/'s device plane replaces that one call.
//
// Host copies (where a plane or a file needs host memory, and only there):
//   - the expert exchange's staging above (until the device plane),
//   - params_host(): a rank's share for weight publication and checkpoints (ep_trainer's
//     serialize, local_state; the rollout group's full_params),
//   - set_params(): weights loaded from a published version or a checkpoint,
//   - adam_bytes()/load_adam(): checkpoints of the optimiser's moments,
//   - broadcast_bytes(): a step's batch (samples are host data) is uploaded on the root and
//     downloaded on every other rank around the NCCL broadcast,
//   - broadcast_share(): each received share is downloaded once (publication needs bytes),
//   - per step the expert part's squared norm (one double) and, in the policy, the logits the
//     GRPO loss reads (model_cuda.h).
//
// Threading: every call on the rank's thread (the CUDA device is set on it by create()).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "policy/adam.h"
#include "policy/expert_exchange.h"
#include "policy/grpo.h"
#include "policy/model.h"
#include "policy/trainer.h"

namespace moerl::fabric {
class collective_group;
}

namespace moerl::job {

class ep_device_rank {
 public:
  // On the calling (rank) thread: selects device_of_rank(global_rank) (job/device.h), builds
  // the device policy: one rank of one holds every expert (no exchange, no staging); a rank of
  // several reaches the others' experts through host_exchange (kept; it must outlive this).
  static result<std::unique_ptr<ep_device_rank>> create(const policy::model_config& model,
                                                        policy::expert_exchange& host_exchange,
                                                        int global_rank);
  ~ep_device_rank();

  result<std::vector<float>> params_host() const;
  status set_params(const std::vector<float>& params);
  result<policy::generation> generate(const std::vector<std::vector<policy::token_id>>& prompts,
                                      int max_new, float temperature, std::mt19937_64& rng);

  // Trainer rank: device gradient and Adam moments (Adam clips by the global norm it is given).
  status make_optimizer(const policy::adam_config& adam);
  // One epoch of ep_trainer's step on this rank: the GRPO gradient of `mine` (advantages
  // already scaled by the rank's share), the dense ranges [offset, length) packed with the
  // expert part's squared norm and all-reduced over `dense` (NCCL, device buffers), unpacked,
  // and Adam with the global norm. Returns the update's figures and that norm.
  result<std::pair<policy::update_stats, double>> train_epoch(
      const std::vector<policy::sample>& mine, const std::vector<double>& advantages,
      const policy::grpo_config& grpo, float temperature,
      const std::vector<std::pair<size_t, size_t>>& dense_ranges, size_t num_dense,
      fabric::collective_group& dense);
  result<std::string> adam_bytes() const;
  status load_adam(const std::string& bytes);

  // NCCL broadcasts over `dense` (group ranks): bytes of `root` to every rank (host bytes
  // staged through device memory), and root's parameter share (its device parameters) to
  // every rank, returned on the host.
  status broadcast_bytes(fabric::collective_group& dense, std::string& bytes, int root);
  result<std::vector<float>> broadcast_share(fabric::collective_group& dense, int root);

 private:
  struct impl;
  explicit ep_device_rank(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace moerl::job
