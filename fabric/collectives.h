// Dense collectives for trainer groups: all-reduce (sum; fp32, bf16) and broadcast, one API
// over two back-ends. Buffers on a GPU go through NCCL (built when MOERL_HAVE_NCCL); host
// buffers go through a CPU path over libfabric: a ring all-reduce (reduce-scatter then
// all-gather), a direct broadcast from the root and a direct gather to it, all completed by
// counting CQ-data immediates like the EP layer (fabric/PROTOCOL.md), never by polling bytes.
//
// Threading: one thread per rank calls into its group; every rank calls the same
// collectives in the same order with the same sizes. A failure (timeout, dead peer)
// breaks the group, as in ep_group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.h"
#include "fabric/bootstrap.h"
#include "fabric/transport.h"

namespace moerl::fabric {

enum class coll_dtype { fp32, bf16 };
enum class memory_kind { host, cuda };

struct collective_config {
  size_t max_bytes = 16 << 20;    // bytes moved per round; larger calls take several rounds
  size_t chunk_bytes = 1 << 20;   // each write carries at most this many bytes
  int64_t op_timeout_ms = 10000;  // a collective not complete within this fails
  bool use_nccl = true;           // GPU buffers use NCCL when it was built in
};

// Takes fabric.op_timeout_ms from the node's configuration.
void apply_config(const config& node_config, collective_config& cfg);

class collective_group {
 public:
  // Collective over `members` (sorted launcher ranks). Opens the libfabric endpoint (and,
  // when built with NCCL and asked for, an NCCL communicator on the current CUDA device).
  static result<std::unique_ptr<collective_group>> create(const transport_options& topt,
                                                          bootstrap& boot,
                                                          const std::vector<int>& members,
                                                          const collective_config& cfg);
  ~collective_group();

  int rank() const;
  int num_ranks() const;
  // "ring-libfabric" or "nccl": which path the last call took (for reports).
  const char* last_backend() const;

  // data[count] of dtype becomes the element-wise sum over ranks. fp32 sums in fp32; bf16
  // sums in fp32 and rounds to bf16 after each ring step (as NCCL does). The result is
  // identical on every rank.
  status all_reduce_sum(void* data, size_t count, coll_dtype dtype,
                        memory_kind where = memory_kind::host);
  // data[bytes] of rank `root` (group rank) is copied to every rank.
  status broadcast(void* data, size_t bytes, int root, memory_kind where = memory_kind::host);
  // Every rank's data[bytes] lands at out[rank * bytes] on rank `root` (out holds n * bytes
  // there; other ranks may pass null). One round per max_bytes / n bytes a rank, where n-1
  // broadcasts would take n-1 rounds of n-1 writes each. Host buffers only.
  status gather(const void* data, size_t bytes, void* out, int root);

 private:
  struct impl;
  explicit collective_group(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace moerl::fabric
