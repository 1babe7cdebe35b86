// One expert-parallel group of policy ranks inside this process: num_ranks rank threads
// (job/rank_threads.h) over fabric's thread bootstrap, each with a fabric_expert_exchange
// (shm between the threads unless fabric.provider names another) and a moe_policy holding
// the dense parameters and ITS experts only (policy/model.h). What a rollout worker uses
// to generate a prompt group on several ranks, and (later) what a trainer uses to step.
//
// Weights come and go as the FULL parameter set (the trainer's serialisation, every
// expert): load() gives each rank its dense tensors and its experts' slices
// (job/param_slicing.h).
//
// Device (job.device=cuda, job/device.h): each rank holds a policy::cuda::moe_policy instead
// (job/internal/ep_device_rank.h), generation and the trainer's step run on its device, and
// with dense collectives the trainer group's all-reduce and broadcasts go through NCCL on
// device buffers (fabric/collectives.h memory_kind::cuda); job.device=cpu keeps the host
// policy and the fabric ring collectives, unchanged. The expert exchange across ranks is the
// host-memory expert plane with explicit host staging (device->host before dispatch,
// host->device after combine: policy/cuda/device_expert_exchange.h): the interim path until
// fabric/'s expert plane takes device memory, which plugs in at ep_device_rank.cpp's
// make_rank_device_exchange. Host copies of the device path: ep_device_rank.h lists them.
//
// Threading: one owner thread calls the methods; each call runs on every rank and returns
// when all are done. A failed call breaks the group (a peer may have timed out mid-step);
// the owner recreates it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "policy/model.h"

namespace moerl::fabric {
class bootstrap;
struct transport_description;
class collective_group;
}  // namespace moerl::fabric

namespace moerl::job {

class ep_device_rank;

struct ep_group_shape {
  int num_ranks = 2;
  int64_t max_decode_rows = 0;     // sequences one rank generates at once (low-latency group)
  int64_t max_train_tokens = 0;    // tokens one rank runs through a training forward (0: none)
  bool dense_collectives = false;  // also a fabric::collective_group per rank (trainers)
  // A group spanning processes: this process holds ranks [first_rank, first_rank +
  // num_local_ranks) and reaches the others through make_bootstrap (rank_threads.h). Empty
  // make_bootstrap: every rank is a thread here.
  int first_rank = 0;
  int num_local_ranks = 0;  // 0: num_ranks
  std::function<std::unique_ptr<fabric::bootstrap>(int rank)> make_bootstrap;
  // Raised when a spanning group lost a member: every rank's fabric wait ends at once
  // (fabric::transport_options::abort). Null: waits end at fabric.op_timeout_ms only.
  std::shared_ptr<const std::atomic<bool>> abort;
};

// Contiguous split of n rows over num_ranks: rank r's [first, first + count).
struct row_range {
  int64_t first = 0, count = 0;
};
row_range rows_of_rank(int64_t n, int rank, int num_ranks);

// The seed of rank r's sampling rng in an EP generation drawn from `base` (exposed so a
// single-rank reference can sample the same rows with the same stream).
uint64_t rank_sampling_seed(uint64_t base, int rank);

// The rows of every rank's part, in rank order (each part holds its rank's rows in order).
policy::generation rows_in_order(std::vector<policy::generation>&& parts);

class ep_policy_group {
 public:
  // Collective set-up of the ranks. Errors name the problem: experts that do not split
  // over the ranks, a missing fabric provider, ...
  static result<std::unique_ptr<ep_policy_group>> create(const config& cfg,
                                                         const policy::model_config& model,
                                                         const ep_group_shape& shape);
  ~ep_policy_group();

  int num_ranks() const;
  bool broken() const;
  const policy::param_layout& full_layout() const;

  // Full serialised parameters (params.h format, all experts) -> every rank's share.
  status load(const std::string& bytes);
  // Back to the initialisation from policy.seed (policy version 0).
  status reset_to_init();

  // Every row starts from `prompt`; rows are split contiguously over the ranks
  // (rows_of_rank), rank r samples with std::mt19937_64(rank_sampling_seed(base_seed, r)).
  // The result lists rows in order, as a single-rank generate of num_rows would.
  result<policy::generation> generate(const std::vector<policy::token_id>& prompt, int num_rows,
                                      int max_new, float temperature, uint64_t base_seed);

  // The same over rows with their own prompts (one length for all).
  result<policy::generation> generate(const std::vector<std::vector<policy::token_id>>& row_prompts,
                                      int max_new, float temperature, uint64_t base_seed);

  // The same, by rank: part r holds rank r's rows when r is one of this process's ranks (a
  // group spanning processes leaves the others' parts empty; their processes hold them).
  result<std::vector<policy::generation>> generate_parts(
      const std::vector<policy::token_id>& prompt, int num_rows, int max_new, float temperature,
      uint64_t base_seed);
  // The same over rows with their own prompts (one length for all: several prompt groups
  // generated as one batch, so each decode step's exchange carries all of them).
  result<std::vector<policy::generation>> generate_parts(
      const std::vector<std::vector<policy::token_id>>& row_prompts, int max_new, float temperature,
      uint64_t base_seed);

  // What a rank's work sees: its policy share (the host policy, or with job.device=cuda the
  // device rank instead: exactly one is set) and, with shape.dense_collectives, its dense
  // collective group (NCCL-backed on the device).
  struct rank_context {
    int rank = 0;
    policy::moe_policy* policy = nullptr;
    ep_device_rank* device = nullptr;
    fabric::collective_group* dense = nullptr;
  };
  // Whether the ranks hold device policies (job.device=cuda).
  bool on_device() const;
  // Runs fn on every rank thread at once (collective calls inside are fine).
  status run_on_ranks(const std::function<status(rank_context&)>& fn);
  // One contribution per member process (num_members of them, this process's ranks each)
  // to every member over the ranks' dense collectives (shape.dense_collectives): member m's
  // first rank broadcasts its bytes, their size first. Not through the coordinator, so a
  // round of small answers costs no control-plane hop. Collective: every member calls it
  // with its own bytes. Every member's bytes, in member order.
  result<std::vector<std::string>> members_allgather(const std::string& mine, int num_members);
  // Every rank's share has this layout (dense tensors + num_experts / num_ranks experts).
  const policy::param_layout& rank_layout() const;
  // The full parameter set assembled from the ranks' shares (owner thread, between calls);
  // only when every rank is local.
  result<std::vector<float>> full_params() const;
  // The ranks this process holds, and one's share (owner thread, between calls).
  int first_local_rank() const;
  int num_local_ranks() const;
  // A copy (device ranks: downloaded on the rank's thread).
  result<std::vector<float>> share(int rank) const;
  // Replaces a local rank's share (owner thread, between calls): a checkpoint shard's load.
  status load_share(int rank, std::vector<float> params);
  // Which transport carries a local rank's expert plane to each peer ("same_process",
  // "same_host", "network") and its libfabric provider: where a group spanning processes
  // (or network namespaces) shows that its experts really crossed between them.
  const fabric::transport_description& expert_plane(int rank) const;

 private:
  struct impl;
  explicit ep_policy_group(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace moerl::job
