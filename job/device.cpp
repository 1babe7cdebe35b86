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

status check_job_device(const config& cfg, const device_facts& facts) {
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
  return error{errc::invalid_config,
               "job.device=cuda: the policy's device path is not built yet (issue 29: its "
               "forward, backward, generation and Adam run on the CPU only); dense-op twins "
               "exist: policy/cuda/dense_ops_cuda.h (linear, rmsnorm, attention "
               "forward/backward/decode, log_softmax_row), policy/cuda/adam_cuda.h (adam) and "
               "kernels/cuda (the MoE primitives); missing: parameters, gradients, activations "
               "and the KV cache in device memory and the model's forward/backward/generate "
               "through those twins; use job.device=cpu"};
}

status check_job_device(const config& cfg) { return check_job_device(cfg, probe_device_facts()); }

}  // namespace moerl::job
