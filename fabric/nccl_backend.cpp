#include "fabric/internal/nccl_backend.h"

#ifdef MOERL_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "common/status_try.h"
#include "kernels/cuda/cuda_check.h"
#endif

namespace moerl::fabric {

#ifdef MOERL_HAVE_NCCL

// One macro per domain: NCCL_CHECK here, with the body and message of CUDA_CHECK
// (kernels/cuda/cuda_check.h): the call, its error string, file and line.
#define NCCL_CHECK(call) \
  MOERL_CUDA_API_CHECK_(call, #call, ncclResult_t, ncclSuccess, ncclGetErrorString)

namespace {

class nccl_impl final : public nccl_backend {
 public:
  ~nccl_impl() override {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  status init(const ncclUniqueId& id, int n, int rank) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    NCCL_CHECK(ncclCommInitRank(&comm_, n, id, rank));
    return {};
  }
  status all_reduce_sum(void* data, size_t count, bool bf16) override {
    NCCL_CHECK(ncclAllReduce(data, data, count, bf16 ? ncclBfloat16 : ncclFloat32, ncclSum, comm_,
                             stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
  }
  status broadcast(void* data, size_t bytes, int root) override {
    NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
  }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

bool nccl_backend::available() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

result<std::unique_ptr<nccl_backend>> nccl_backend::create(bootstrap& boot,
                                                           const std::vector<int>& members,
                                                           int rank, int64_t timeout_ms) {
  ncclUniqueId id{};
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  ASSIGN_OR_RETURN(
      auto all, boot.allgather(members, std::string(reinterpret_cast<const char*>(&id), sizeof id),
                               timeout_ms));
  if (all[0].size() != sizeof id)
    return error{errc::malformed_message, "NCCL unique id has the wrong size"};
  std::memcpy(&id, all[0].data(), sizeof id);
  auto impl = std::make_unique<nccl_impl>();
  if (auto st = impl->init(id, static_cast<int>(members.size()), rank); !st) return st.err();
  return std::unique_ptr<nccl_backend>(std::move(impl));
}

#else

bool nccl_backend::available() { return false; }

result<std::unique_ptr<nccl_backend>> nccl_backend::create(bootstrap&, const std::vector<int>&, int,
                                                           int64_t) {
  return error{errc::invalid_argument, "moerl was built without NCCL (MOERL_HAVE_NCCL off)"};
}

#endif

}  // namespace moerl::fabric
