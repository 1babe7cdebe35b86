// fabric's NCCL path (fabric/nccl_backend.cpp), the one collective_group takes for GPU
// buffers: a one-member group on a cudaMalloc'd buffer all-reduces (fp32, bf16: a sum over one
// rank leaves every element as it was) and broadcasts through NCCL, and says so
// (last_backend() == "nccl"). Skipped without a CUDA device (bench/gpu_check.sh runs it on a
// GPU and counts a skip there as a failure). One member because NCCL refuses two ranks on one
// GPU, and the machines that check this have one.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/collectives.h"
#include "kernels/dtypes.h"

namespace moerl::fabric {
namespace {

bool gpu_visible() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();  // a missing driver leaves an error behind; start later calls clean
  return ok;
}

// Copies `host` to the device, runs `op` on the device copy, copies it back into `out`.
template <class T, class Op>
int round_trip(const std::vector<T>& host, std::vector<T>& out, Op op) {
  void* d = nullptr;
  const size_t bytes = host.size() * sizeof(T);
  if (cudaMalloc(&d, bytes) != cudaSuccess) return 20;
  int rc = 0;
  if (cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess) rc = 21;
  if (rc == 0) {
    const status st = op(d);
    if (!st) {
      std::fprintf(stderr, "collective: %s\n", st.err().to_string().c_str());
      rc = 22;
    }
  }
  out.resize(host.size());
  if (rc == 0 && cudaMemcpy(out.data(), d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) rc = 23;
  cudaFree(d);
  return rc;
}

int one_member_group(bootstrap& b) {
  auto g = collective_group::create(transport_options{}, b, all_members(b), collective_config{});
  if (!g) {
    std::fprintf(stderr, "create: %s\n", g.err().to_string().c_str());
    return 1;
  }
  const size_t count = 4099;  // not a multiple of anything NCCL chunks by
  std::vector<float> f(count), f_back;
  for (size_t i = 0; i < count; ++i) f[i] = static_cast<float>(i % 251) - 100.25f;
  if (int rc = round_trip(f, f_back, [&](void* d) {
        return (*g)->all_reduce_sum(d, count, coll_dtype::fp32, memory_kind::cuda);
      }))
    return rc;
  if (std::string((*g)->last_backend()) != "nccl") {
    std::fprintf(stderr, "fp32 all-reduce took %s, not nccl\n", (*g)->last_backend());
    return 2;
  }
  if (f_back != f) return 3;
  std::vector<kernels::bf16> h(count), h_back;
  for (size_t i = 0; i < count; ++i) h[i] = kernels::float_to_bf16(static_cast<float>(i % 17));
  if (int rc = round_trip(h, h_back, [&](void* d) {
        return (*g)->all_reduce_sum(d, count, coll_dtype::bf16, memory_kind::cuda);
      }))
    return rc;
  for (size_t i = 0; i < count; ++i)
    if (h_back[i].bits != h[i].bits) return 4;
  std::vector<char> c(10000), c_back;
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<char>(i * 7);
  if (int rc = round_trip(
          c, c_back, [&](void* d) { return (*g)->broadcast(d, c.size(), 0, memory_kind::cuda); }))
    return rc;
  if (std::string((*g)->last_backend()) != "nccl" || c_back != c) return 5;
  return 0;
}

TEST(nccl_collectives, a_one_member_group_all_reduces_and_broadcasts_a_cuda_buffer_through_nccl) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device visible: NCCL path not checked";
  const launch_report report = launch_threads(1, one_member_group);
  ASSERT_EQ(report.exit_codes.size(), 1u);
  EXPECT_EQ(report.exit_codes[0], 0) << "see stderr for the failing step";
}

}  // namespace
}  // namespace moerl::fabric
