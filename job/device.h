// job.device: where the policy's tensors and compute live. `cpu` (the default) runs
// everywhere. `cuda` runs in one place today: `moerl learn`, one process holding every expert,
// on the device policy (policy/cuda/model_cuda.h; not yet run on a GPU when written: see
// bench/gpu_check.sh). Groups of processes (`moerl up`, node roles) refuse it with the reason,
// never accepting it and silently running on the CPU (DESIGN.md §1: a silently selected
// fallback is a bug). Issue 29 builds the CUDA path layer by layer; this check names what
// exists and what is missing.
#pragma once

#include "common/config.h"
#include "common/error.h"

namespace moerl::job {

// What this process can offer job.device=cuda.
struct device_facts {
  bool built_with_cuda = false;  // compiled with MOERL_HAVE_CUDA (`moerl version --json`: cuda)
  bool device_visible = false;   // a CUDA device is visible to this process
};

// Who runs the policy: one process with every expert local (`moerl learn`), or a group of
// processes whose expert exchange and trainer all-reduce cross process boundaries (`moerl up`
// and its node roles).
enum class device_scope { single_process, group };

// This build's facts, and whether a CUDA device is visible now (a missing driver counts as
// none). Safe to call from any thread.
device_facts probe_device_facts();

// errc::invalid_config naming job.device when it asks for what `facts` cannot give: CUDA in a
// build without it, a device that is not visible, or (scope group, with a device) the device
// path of a group, which is not built yet. ok for job.device=cpu, and for cuda in a single
// process with a CUDA build and a visible device.
status check_job_device(const config& cfg, const device_facts& facts,
                        device_scope scope = device_scope::group);

// check_job_device against this process's facts: `moerl up` calls it before starting any node,
// every node's job before it builds anything, and `moerl learn` (scope single_process).
status check_job_device(const config& cfg, device_scope scope = device_scope::group);

}  // namespace moerl::job
