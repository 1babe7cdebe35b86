// job.device: where the policy's tensors and compute live. `cpu` (the default) is the only
// device the policy runs on today; `cuda` is refused with the reason, never accepted and
// silently run on the CPU (DESIGN.md §1: a silently selected fallback is a bug). Issue 29
// builds the CUDA path layer by layer; this check names what exists and what is missing.
#pragma once

#include "common/config.h"
#include "common/error.h"

namespace moerl::job {

// What this process can offer job.device=cuda.
struct device_facts {
  bool built_with_cuda = false;  // compiled with MOERL_HAVE_CUDA (`moerl version --json`: cuda)
  bool device_visible = false;   // a CUDA device is visible to this process
};

// This build's facts, and whether a CUDA device is visible now (a missing driver counts as
// none). Safe to call from any thread.
device_facts probe_device_facts();

// errc::invalid_config naming job.device when it asks for what `facts` cannot give: CUDA in a
// build without it, a device that is not visible, or (with a device) the policy's CUDA path,
// which is not built yet. ok for job.device=cpu.
status check_job_device(const config& cfg, const device_facts& facts);

// check_job_device against this process's facts: `moerl up` calls it before starting any node
// and every node's job before it builds anything.
status check_job_device(const config& cfg);

}  // namespace moerl::job
