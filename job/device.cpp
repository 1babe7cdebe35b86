#include "job/device.h"

#include <string>

#ifdef MOERL_HAVE_CUDA
#include "kernels/cuda/kernels_cuda.h"
#endif

namespace moerl::job {

device_facts probe_device_facts() {
  device_facts f;
#ifdef MOERL_HAVE_CUDA
  f.built_with_cuda = true;
  f.device_visible = kernels::cuda::device_available();
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
  return error{errc::invalid_config,
               "job.device=cuda: a group of processes cannot run the policy on the device yet "
               "(issue 29): `moerl learn` runs it there (one process, every expert local: "
               "policy/cuda/model_cuda.h), but moerl up and node roles also need the expert "
               "plane on device memory (the expert exchange across processes moves host "
               "buffers) and NCCL in the trainer group (its gradient all-reduce runs over host "
               "memory; fabric/collectives.h's NCCL path for device buffers is not used there); "
               "use job.device=cpu here, or moerl learn for the device path"};
}

status check_job_device(const config& cfg, device_scope scope) {
  return check_job_device(cfg, probe_device_facts(), scope);
}

}  // namespace moerl::job
