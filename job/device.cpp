#include "job/device.h"

#include <string>

#ifdef MOERL_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace moerl::job {

device_facts probe_device_facts() {
  device_facts f;
#ifdef MOERL_HAVE_CUDA
  f.built_with_cuda = true;
  int n = 0;  // a missing driver is an error here: no device
  f.device_count = cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  f.device_visible = f.device_count > 0;
#endif
#ifdef MOERL_HAVE_NCCL
  f.built_with_nccl = true;
#endif
  return f;
}

status check_job_device(const config& cfg, const device_facts& facts, device_scope scope) {
  const std::string device = cfg.get_string("job.device");
  if (device == "cpu") return ok_status();
  // The schema admits cpu|cuda only; anything else is refused there, with file and line.
  if (!facts.built_with_cuda)
    return error{errc::invalid_config,
                 "job.device=cuda: this moerl was built without CUDA (MOERL_HAVE_CUDA off: no "
                 "nvcc at configure time, or MOERL_ENABLE_CUDA=OFF; `moerl version --json` shows "
                 "\"cuda\": \"absent\"); rebuild with the CUDA toolkit or use job.device=cpu"};
  if (!facts.device_visible)
    return error{errc::invalid_config,
                 "job.device=cuda: no CUDA device visible (cudaGetDeviceCount found none or no "
                 "driver; check CUDA_VISIBLE_DEVICES and the NVIDIA driver) or use job.device=cpu"};
  if (scope == device_scope::single_process) return ok_status();
  if (!facts.built_with_nccl)
    return error{errc::invalid_config,
                 "job.device=cuda: a group of processes needs NCCL for the trainer group's dense "
                 "all-reduce and broadcasts on the device, and this moerl was built without it "
                 "(MOERL_HAVE_NCCL off: configure found no nccl.h/libnccl, or "
                 "MOERL_ENABLE_NCCL=OFF); rebuild with NCCL, use moerl learn (one process), or "
                 "job.device=cpu"};
  return check_trainer_devices(cfg, static_cast<int>(cfg.get_int("job.trainer_ep_ranks")), facts);
}

status check_job_device(const config& cfg, device_scope scope) {
  return check_job_device(cfg, probe_device_facts(), scope);
}

status check_trainer_devices(const config& cfg, int nccl_ranks, const device_facts& facts) {
  if (cfg.get_string("job.device") != "cuda" || nccl_ranks <= facts.device_count)
    return ok_status();
  return error{errc::invalid_config,
               "job.device=cuda: " + std::to_string(nccl_ranks) +
                   " trainer ranks on this host (trainer.group_size x job.trainer_ep_ranks) but " +
                   std::to_string(facts.device_count) +
                   " CUDA device(s) visible: NCCL puts every rank of the trainer group on its own "
                   "device; lower trainer.group_size or job.trainer_ep_ranks, or use "
                   "job.device=cpu"};
}

int device_of_rank(int global_rank, const device_facts& facts) {
  return facts.device_count > 0 ? global_rank % facts.device_count : 0;
}

}  // namespace moerl::job
