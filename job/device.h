// job.device: where the policy's tensors and compute live. `cpu` (the default) runs
// everywhere. `cuda` runs the device policy (policy/cuda/model_cuda.h) in `moerl learn` (one
// process, every expert local) and in groups of processes (`moerl up`, node roles: the rollout
// and trainer ranks of job/ep_policy_group.h hold a device policy each, the trainer group's
// dense all-reduce and broadcasts go through NCCL; the expert exchange across ranks stages
// through host memory until fabric/'s expert plane takes device memory: ep_policy_group.h).
// Not yet run on a GPU when written: see bench/gpu_check.sh. What cannot run is refused with
// the reason, never accepted and silently run on the CPU (DESIGN.md §1: a silently selected
// fallback is a bug).
#pragma once

#include "common/config.h"
#include "common/error.h"

namespace moerl::job {

// What this process can offer job.device=cuda.
struct device_facts {
  bool built_with_cuda = false;  // compiled with MOERL_HAVE_CUDA (`moerl version --json`: cuda)
  bool device_visible = false;   // a CUDA device is visible to this process
  bool built_with_nccl = false;  // compiled with MOERL_HAVE_NCCL (the trainer group's plane)
  int device_count = 0;          // CUDA devices visible to this process
};

// Who runs the policy: one process with every expert local (`moerl learn`), or a group of
// processes whose expert exchange and trainer all-reduce cross process boundaries (`moerl up`
// and its node roles).
enum class device_scope { single_process, group };

// This build's facts, and whether a CUDA device is visible now (a missing driver counts as
// none). Safe to call from any thread.
device_facts probe_device_facts();

// errc::invalid_config naming job.device when it asks for what `facts` cannot give: CUDA in a
// build without it, a device that is not visible, or (scope group) a build without NCCL (the
// trainer group's dense plane on the device) or more trainer ranks in one process
// (job.trainer_ep_ranks) than visible devices (NCCL puts each rank on its own device). ok for
// job.device=cpu, and for cuda when none of these holds.
status check_job_device(const config& cfg, const device_facts& facts,
                        device_scope scope = device_scope::group);

// check_job_device against this process's facts: `moerl up` calls it before starting any node,
// every node's job before it builds anything, and `moerl learn` (scope single_process).
status check_job_device(const config& cfg, device_scope scope = device_scope::group);

// For launchers that place a whole trainer group on this host (`moerl up`): job.device=cuda
// with nccl_ranks trainer ranks on this host (members x job.trainer_ep_ranks) needs as many
// visible devices; errc::invalid_config naming the counts otherwise. ok for job.device=cpu.
status check_trainer_devices(const config& cfg, int nccl_ranks, const device_facts& facts);

// The device a policy rank uses: global rank modulo the visible devices (a host runs as many
// consecutive ranks as it has devices). 0 when none is visible.
int device_of_rank(int global_rank, const device_facts& facts);

}  // namespace moerl::job
