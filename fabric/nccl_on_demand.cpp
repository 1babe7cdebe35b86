// NCCL's entry points that moerl calls (fabric/nccl_backend.cpp, provenance), opening libnccl
// at the first one (common/on_demand_library.h says why: 220 MB that every process mapped at
// start, though only a trainer group on CUDA uses it). Built only with MOERL_HAVE_NCCL; a new
// NCCL call shows as an undefined symbol at link time and belongs here. Without the library
// every call returns ncclSystemError and the first failure is logged with dlerror's text.
#include <nccl.h>

#include <string>

#include "common/on_demand_library.h"

namespace {

moerl::on_demand_library& libnccl() {
  static moerl::on_demand_library lib({"libnccl.so.2", MOERL_NCCL_BUILD_PATH},
                                      "NCCL collectives (libnccl)");
  return lib;
}

template <class F>
F* entry(const char* name) {
  return moerl::on_demand_symbol<F>(libnccl(), name);
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  static auto* f = entry<decltype(ncclGetVersion)>("ncclGetVersion");
  return f ? f(version) : ncclSystemError;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  static auto* f = entry<decltype(ncclGetUniqueId)>("ncclGetUniqueId");
  return f ? f(unique_id) : ncclSystemError;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  static auto* f = entry<decltype(ncclCommInitRank)>("ncclCommInitRank");
  return f ? f(comm, nranks, comm_id, rank) : ncclSystemError;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  static auto* f = entry<decltype(ncclCommDestroy)>("ncclCommDestroy");
  return f ? f(comm) : ncclSystemError;
}

const char* ncclGetErrorString(ncclResult_t result) {
  static auto* f = entry<decltype(ncclGetErrorString)>("ncclGetErrorString");
  if (f) return f(result);
  static const std::string why = "NCCL unavailable: " + libnccl().load_error();
  return why.c_str();
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  static auto* f = entry<decltype(ncclBroadcast)>("ncclBroadcast");
  return f ? f(sendbuff, recvbuff, count, datatype, root, comm, stream) : ncclSystemError;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  static auto* f = entry<decltype(ncclAllReduce)>("ncclAllReduce");
  return f ? f(sendbuff, recvbuff, count, datatype, op, comm, stream) : ncclSystemError;
}

}  // extern "C"
