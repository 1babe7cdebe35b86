// The transport on device memory (fabric/DEVICE_MEMORY.md): ranks of one host write into each
// other's cudaMalloc'd regions through CUDA IPC handles, from device and from host memory,
// and device bytes into host regions; network peers without FI_HMEM (tcp) are refused with a
// message that names host staging. Every rank is a forked process sharing the one GPU, as in
// bench/gpu_check.sh. Without a visible device every test skips, saying so (the parent never
// touches CUDA: a child of a process that initialised CUDA cannot use it).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "fabric/bootstrap.h"
#include "fabric/device_memory.h"
#include "fabric/transport.h"
#include "tests/fabric/device_ranks.h"
#include "tests/fabric/region_exchange.h"

namespace moerl::fabric {
namespace {
using test::expect_ranks_passed;
using test::kNoDevice;

char pattern(int writer, size_t i) { return static_cast<char>((i * 29 + writer * 11 + 1) & 0x7f); }

// Each rank writes `num_writes` blocks into every rank's device region (itself included:
// the same-process path): even blocks from a device source, odd ones from a host source;
// then one block of its device source into every rank's host region. Everyone checks every
// byte it received and that each peer's path is the one the distance calls for.
int device_exchange(bootstrap& b, int num_writes, size_t block) {
  if (!device_count()) return kNoDevice;
  transport_options o;
  o.provider = "tcp";
  o.require_provider = true;
  auto t = open_transport(o);
  if (!t) return 10;
  const int n = b.size(), me = b.rank();
  const size_t src_bytes = num_writes * block;
  auto dev_src = (*t)->allocate_device_region(src_bytes);
  auto dev_dst = (*t)->allocate_device_region(n * src_bytes);
  auto host_dst = (*t)->allocate_region(n * block);
  std::vector<char> host_src(src_bytes);
  for (size_t i = 0; i < src_bytes; ++i) host_src[i] = pattern(me, i);
  auto host_src_reg = (*t)->register_memory(host_src.data(), host_src.size());
  if (!dev_src || !dev_dst || !host_dst || !host_src_reg) return 11;
  if (!device_copy(dev_src->ptr, host_src.data(), src_bytes)) return 12;
  auto regions = test::exchange_regions(b, **t, {dev_dst->remote, host_dst->remote});
  if (!regions) return 13;
  const auto& paths = (*t)->describe().peer_device_paths;
  if (static_cast<int>(paths.size()) != n) return 14;
  for (int r = 0; r < n; ++r)
    if (paths[r] != (r == me ? "cuda_same_process" : "cuda_ipc")) return 15;
  const int64_t deadline = now_ns() + 30'000'000'000;
  for (int peer = 0; peer < n; ++peer) {
    for (int w = 0; w < num_writes; ++w) {
      const bool from_device = w % 2 == 0;
      const local_region& src = from_device ? *dev_src : *host_src_reg;
      const char* from = static_cast<const char*>(src.ptr) + w * block;
      if (!(*t)->write(peer, src, from, block, (*regions)[peer][0],
                       (static_cast<uint64_t>(me) * num_writes + w) * block,
                       static_cast<uint32_t>(me << 16 | w), deadline))
        return 16;
    }
    if (!(*t)->write(peer, *dev_src, dev_src->ptr, block, (*regions)[peer][1], me * block,
                     static_cast<uint32_t>(me << 16 | 0xffff), deadline))
      return 17;
  }
  const size_t expected = static_cast<size_t>(n) * (num_writes + 1);
  std::vector<uint32_t> imms;
  while ((imms.size() < expected || (*t)->outstanding() > 0) && now_ns() < deadline)
    if (!(*t)->progress(imms)) return 18;
  if (imms.size() != expected) return 19;
  std::sort(imms.begin(), imms.end());
  for (int r = 0; r < n; ++r) {
    for (int w = 0; w < num_writes; ++w)
      if (imms[r * (num_writes + 1) + w] != static_cast<uint32_t>(r << 16 | w)) return 20;
    if (imms[r * (num_writes + 1) + num_writes] != static_cast<uint32_t>(r << 16 | 0xffff))
      return 21;
  }
  std::vector<char> got(n * src_bytes);
  if (!device_copy(got.data(), dev_dst->ptr, got.size())) return 22;
  const char* host_got = static_cast<const char*>(host_dst->ptr);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < src_bytes; ++i)
      if (got[r * src_bytes + i] != pattern(r, i)) return 23;
    for (size_t i = 0; i < block; ++i)
      if (host_got[r * block + i] != pattern(r, i)) return 24;
  }
  // Nobody closes its transport (freeing its regions) before everyone checked.
  return b.allgather(all_members(b), "", 20000).ok() ? 0 : 25;
}

TEST(device_transport, two_processes_on_one_gpu_write_each_other_through_cuda_ipc) {
  expect_ranks_passed(launch_processes(
      2, [](bootstrap& b) { return device_exchange(b, 8, 65536); }, 120000));
}

TEST(device_transport, four_processes_on_one_gpu_write_each_other_through_cuda_ipc) {
  expect_ranks_passed(launch_processes(
      4, [](bootstrap& b) { return device_exchange(b, 6, 40000); }, 120000));
}

// Ranks given different host ids are network peers; tcp registers no device memory, so
// their device regions are described as host staging and a write into one is refused
// before anything is posted, naming why.
TEST(device_transport, a_network_peer_without_fi_hmem_is_refused_naming_host_staging) {
  expect_ranks_passed(launch_processes(
      2,
      [](bootstrap& b) {
        if (!device_count()) return kNoDevice;
        transport_options o;
        o.provider = "tcp";
        o.require_provider = true;
        o.hmem = true;  // asked for, and tcp does not have it: the fallback endpoint
        o.host_id = "host-" + std::to_string(b.rank());
        auto t = open_transport(o);
        if (!t) return 10;
        if ((*t)->describe().hmem) return 11;
        auto dst = (*t)->allocate_device_region(4096);
        if (!dst || dst->remote.fabric_registered) return 12;
        auto regions = test::exchange_regions(b, **t, {dst->remote});
        if (!regions) return 13;
        const int peer = 1 - b.rank();
        if ((*t)->describe().peer_device_paths[peer] != "host_staging") return 14;
        std::vector<char> src(64, 1);
        auto reg = (*t)->register_memory(src.data(), src.size());
        if (!reg) return 15;
        auto st = (*t)->write(peer, *reg, src.data(), src.size(), (*regions)[peer][0], 0, 1,
                              now_ns() + 1'000'000'000);
        if (st || st.err().message.find("host memory") == std::string::npos) return 16;
        return b.allgather(all_members(b), "", 20000).ok() ? 0 : 17;
      },
      60000));
}

}  // namespace
}  // namespace moerl::fabric
