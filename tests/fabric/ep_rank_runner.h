// Shared by the EP tests: one rank's life in a test group — build the group, run steps of
// dispatch, stand-in experts and combine, and check each against the reference.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/bootstrap.h"
#include "fabric/device_memory.h"
#include "fabric/ep_group.h"
#include "fabric/ep_workload.h"

namespace moerl::fabric::test {

struct ep_case {
  std::string provider = "shm";
  bool shim = false;
  ep_mode mode = ep_mode::normal;
  ep_dtype dtype = ep_dtype::bf16;
  int num_experts = 48;
  int64_t hidden = 96;
  int topk = 4;
  int64_t tokens = 40;
  int steps = 18;  // more than 16, so the step field of the immediates wraps around
  int64_t ll_entries_per_write = 1;
  int ranks_per_node = 0;  // normal mode: > 0 splits the ranks into nodes (two-level path)
  // transport_options::paths: "fabric" (every pair through libfabric, the shim's ground) or
  // "auto" (a transport per distance).
  std::string paths = "fabric";
  // With paths "auto": > 0 gives every ranks_per_host consecutive ranks their own host id,
  // so one box holds same-host and network pairs at once.
  int ranks_per_host = 0;
  bool threads = false;  // ranks are threads of one process (expect same_process pairs)
  // low_latency and normal: where the group keeps its payload rows (cuda: the steps' x, expert
  // outputs and y are device memory too, staged by run_step).
  ep_memory memory = ep_memory::host;
  // low_latency: ep_config::ll_expert_stride (0: compact rows). run_step checks the block
  // layout through the same reference, and that rows past each expert's count are untouched.
  int64_t ll_expert_stride = 0;
};

// The workload of step `step`: cycles through the edge cases the EP layer must survive.
inline workload_params step_workload(const ep_case& c, int num_ranks, int step) {
  workload_params p;
  p.num_ranks = num_ranks;
  p.num_experts = c.num_experts;
  p.hidden = c.hidden;
  p.topk = c.topk;
  p.dtype = c.dtype;
  p.tokens_per_rank = c.tokens;
  p.seed = 100 + static_cast<uint64_t>(step);
  p.ranks_per_node = c.ranks_per_node;
  switch (step % 5) {
    case 0: p.routing = "uniform"; break;
    case 1: p.routing = "zipf"; break;      // skewed expert load
    case 2: p.routing = "one_rank"; break;  // a token routed to one rank k times
    case 3:
      p.mask_fraction = 0.3;
      p.vary_tokens = true;
      break;  // -1 entries, uneven counts
    case 4:
      p.zero_tokens_rank = num_ranks - 1;
      p.routing = "zipf";
      break;  // a rank sends nothing
  }
  return p;
}

inline int report(int rank, const std::string& what, const error& e) {
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what.c_str(), e.to_string().c_str());
  return 1;
}

// The step's payload buffers in the group's payload memory: host memory, or (ep_memory
// cuda) device memory that run_step fills and reads back with device copies.
class payload_buffer {
 public:
  payload_buffer(bool on_device, size_t bytes) : on_device_(on_device) {
    bytes = std::max<size_t>(bytes, 1);
    if (!on_device_) {
      host_.resize(bytes);
      return;
    }
    auto a = device_allocate(bytes);
    if (a) device_ = a->ptr;
  }
  ~payload_buffer() { device_free(device_); }
  payload_buffer(const payload_buffer&) = delete;
  payload_buffer& operator=(const payload_buffer&) = delete;
  void* get() { return on_device_ ? device_ : host_.data(); }

 private:
  bool on_device_;
  std::vector<char> host_;
  void* device_ = nullptr;
};

inline status payload_copy(bool on_device, void* dst, const void* src, size_t bytes) {
  return memory_copy(on_device ? memory_kind::cuda : memory_kind::host, dst, src, bytes);
}

// ll_expert_stride's block layout: local expert j's i-th row at j * stride + i of `blocks`,
// row r (of expert j) at r of `rows`. into_blocks copies rows to blocks, else blocks to rows.
inline void copy_block_rows(const dispatch_output& d, int64_t row_bytes, char* blocks, char* rows,
                            bool into_blocks) {
  for (size_t j = 0; j + 1 < d.expert_offset.size(); ++j) {
    const int64_t first = d.expert_offset[j], count = d.expert_offset[j + 1] - first;
    char* block = blocks + static_cast<int64_t>(j) * d.expert_stride * row_bytes;
    char* compact = rows + first * row_bytes;
    const auto bytes = static_cast<size_t>(count * row_bytes);
    if (into_blocks)
      std::memcpy(block, compact, bytes);
    else
      std::memcpy(compact, block, bytes);
  }
}

// The byte run_step fills the block layout's recv rows with, to see which rows were written.
constexpr unsigned char kUnwrittenByte = 0x5a;

// Whether every row of the block layout past its expert's count still holds kUnwrittenByte.
inline bool block_gaps_untouched(const dispatch_output& d, int64_t row_bytes, const char* blocks) {
  for (size_t j = 0; j + 1 < d.expert_offset.size(); ++j) {
    const int64_t count = d.expert_offset[j + 1] - d.expert_offset[j];
    const char* block = blocks + static_cast<int64_t>(j) * d.expert_stride * row_bytes;
    for (int64_t b = count * row_bytes; b < d.expert_stride * row_bytes; ++b)
      if (static_cast<unsigned char>(block[b]) != kUnwrittenByte) return false;
  }
  return true;
}

// One step on an existing group; 0 when dispatch and combine match the reference. With
// group_buffers the tokens go into g.dispatch_buffer() and the experts write their outputs
// into g.combine_buffer() (low-latency: same-host peers read both in place), else both stay
// in memory of the caller's own.
inline int run_step(ep_group& g, const workload_params& p, int boot_rank,
                    bool group_buffers = false) {
  std::vector<rank_inputs> all;
  for (int r = 0; r < p.num_ranks; ++r) all.push_back(make_rank_inputs(p, r));
  const rank_inputs& in = all[g.rank()];
  const bool on_device = g.config().memory == ep_memory::cuda;
  const int64_t row_bytes = p.hidden * static_cast<int64_t>(ep_dtype_size(p.dtype));
  const int64_t stride = g.config().ll_expert_stride;
  const auto block_bytes = static_cast<size_t>(g.num_local_experts() * stride * row_bytes);
  payload_buffer recv_blocks(on_device, block_bytes);
  if (stride > 0) {
    const std::vector<char> unwritten(block_bytes, static_cast<char>(kUnwrittenByte));
    if (auto st = payload_copy(on_device, recv_blocks.get(), unwritten.data(), block_bytes); !st)
      return report(boot_rank, "recv rows to payload memory", st.err());
    if (auto st = g.set_recv_rows(recv_blocks.get()); !st)
      return report(boot_rank, "set_recv_rows", st.err());
  }
  payload_buffer own_x(on_device, in.x.size());
  void* x = group_buffers ? g.dispatch_buffer() : own_x.get();
  if (!x) return report(boot_rank, "dispatch_buffer", error{errc::internal, "null"});
  if (auto st = payload_copy(on_device, x, in.x.data(), in.x.size()); !st)
    return report(boot_rank, "x to payload memory", st.err());
  auto d = g.dispatch(x, in.topk_idx.data(), in.topk_weights.data(), in.num_tokens);
  if (!d) return report(boot_rank, "dispatch", d.err());
  // The checks read the received rows on the CPU: from device memory, through a host copy.
  dispatch_output received = **d;
  if (received.expert_stride != stride || (stride > 0 && received.recv_x != recv_blocks.get()))
    return report(boot_rank, "dispatch", error{errc::internal, "recv_x is not the set_recv_rows"});
  std::vector<char> recv_host(static_cast<size_t>(received.num_recv_rows * row_bytes));
  std::vector<char> blocks_host(stride > 0 ? block_bytes : 0);
  std::vector<char>& landed = stride > 0 ? blocks_host : recv_host;
  if (auto st = payload_copy(on_device, landed.data(), received.recv_x, landed.size()); !st)
    return report(boot_rank, "recv_x from payload memory", st.err());
  if (stride > 0) {
    if (!block_gaps_untouched(received, row_bytes, blocks_host.data()))
      return report(boot_rank, "dispatch",
                    error{errc::internal, "a row past an expert's count was written"});
    copy_block_rows(received, row_bytes, blocks_host.data(), recv_host.data(), false);
  }
  received.recv_x = recv_host.data();
  if (auto st = check_dispatch(p, all, g.rank(), received); !st)
    return report(boot_rank, "check", st.err());
  std::vector<char> expert_out;
  apply_experts(p, g.rank() * g.num_local_experts(), received, expert_out);
  if (stride > 0) {  // the outputs in recv_x's block layout (gaps: whatever)
    blocks_host.assign(block_bytes, 0);
    copy_block_rows(received, row_bytes, blocks_host.data(), expert_out.data(), true);
    expert_out.swap(blocks_host);
  }
  payload_buffer own_out(on_device, expert_out.size());
  void* combine_in = group_buffers ? g.combine_buffer() : own_out.get();
  if (!combine_in) return report(boot_rank, "combine_buffer", error{errc::internal, "null"});
  if (auto st = payload_copy(on_device, combine_in, expert_out.data(), expert_out.size()); !st)
    return report(boot_rank, "expert outputs to payload memory", st.err());
  payload_buffer y_out(on_device, in.x.size());
  if (auto st = g.combine(**d, combine_in, y_out.get()); !st)
    return report(boot_rank, "combine", st.err());
  std::vector<char> y(std::max<size_t>(in.x.size(), 1));
  if (auto st = payload_copy(on_device, y.data(), y_out.get(), in.x.size()); !st)
    return report(boot_rank, "y from payload memory", st.err());
  const std::vector<char> want = reference_combine(p, all, g.rank(), g.config().mode);
  if (in.x.size() > 0 && std::memcmp(y.data(), want.data(), in.x.size()) != 0) {
    std::fprintf(stderr, "rank %d: combine differs from the reference bitwise\n", boot_rank);
    return 1;
  }
  return 0;
}

inline transport_options options_for(const ep_case& c, int rank) {
  transport_options o;
  o.provider = c.provider;
  o.require_provider = true;
  o.reorder_shim = c.shim;
  o.shim_seed = 1234 + static_cast<uint64_t>(rank);
  o.paths = c.paths;
  if (c.ranks_per_host > 0) o.host_id = "test-host-" + std::to_string(rank / c.ranks_per_host);
  return o;
}

// The distance each pair must have taken: "" when the case does not say (paths "fabric").
inline std::string expected_path(const ep_case& c, int rank, int peer) {
  if (c.paths != "auto") return "";
  if (rank == peer) return "same_process";
  if (c.ranks_per_host > 0 && rank / c.ranks_per_host != peer / c.ranks_per_host) return "network";
  return c.threads ? "same_process" : "same_host";
}

inline ep_config config_for(const ep_case& c) {
  ep_config cfg;
  cfg.mode = c.mode;
  cfg.num_experts = c.num_experts;
  cfg.hidden = c.hidden;
  cfg.topk = c.topk;
  cfg.dtype = c.dtype;
  cfg.max_tokens_per_rank = c.tokens;
  cfg.chunk_bytes = 4096;  // small chunks: many writes per peer, so reordering has room
  cfg.op_timeout_ms = 20000;
  cfg.ll_entries_per_write = c.ll_entries_per_write;
  cfg.ranks_per_node = c.ranks_per_node;
  cfg.memory = c.memory;
  cfg.ll_expert_stride = c.ll_expert_stride;
  return cfg;
}

inline int run_rank(bootstrap& b, const ep_case& c) {
  auto g = ep_group::create(options_for(c, b.rank()), b, all_members(b), config_for(c));
  if (!g) return report(b.rank(), "create", g.err());
  // No silent fallback: every pair took the transport its distance allows.
  for (int peer = 0; peer < b.size(); ++peer) {
    const std::string want = expected_path(c, b.rank(), peer);
    const auto& paths = (*g)->describe().peer_paths;
    if (!want.empty() && (paths.size() != static_cast<size_t>(b.size()) || paths[peer] != want)) {
      std::fprintf(stderr, "rank %d: peer %d went %s, expected %s\n", b.rank(), peer,
                   paths.size() > static_cast<size_t>(peer) ? paths[peer].c_str() : "?",
                   want.c_str());
      return 1;
    }
  }
  // Odd steps (the last one among them) use the group's dispatch and combine buffers.
  for (int s = 0; s < c.steps; ++s)
    if (int rc = run_step(**g, step_workload(c, b.size(), s), b.rank(), s % 2 == 1); rc != 0)
      return rc;
  uint64_t shares_memory = 0;  // peers (ourselves included) whose memory we map
  for (int peer = 0; peer < b.size(); ++peer)
    shares_memory +=
        !expected_path(c, b.rank(), peer).empty() && expected_path(c, b.rank(), peer) != "network";
  // Low-latency with the group's buffers: every peer that shares memory with us read our
  // tokens and our expert outputs in place.
  if (c.mode == ep_mode::low_latency && c.steps % 2 == 0) {
    const ep_step_bytes& last = (*g)->last_step_bytes();
    if (last.combine_in_place_peers != shares_memory ||
        last.dispatch_in_place_peers != shares_memory) {
      std::fprintf(stderr,
                   "rank %d: %llu peers read our tokens and %llu our outputs in place, expected "
                   "%llu\n",
                   b.rank(), static_cast<unsigned long long>(last.dispatch_in_place_peers),
                   static_cast<unsigned long long>(last.combine_in_place_peers),
                   static_cast<unsigned long long>(shares_memory));
      return 1;
    }
  }
  // Normal mode on one node stores rows in place at every peer that shares memory with us.
  if (c.mode == ep_mode::normal && c.ranks_per_node == 0) {
    const uint64_t want = shares_memory;
    const uint64_t got = (*g)->last_step_bytes().dispatch_in_place_peers;
    if (got != want) {
      std::fprintf(stderr, "rank %d: rows stored in place at %llu peers, expected %llu\n", b.rank(),
                   static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
      return 1;
    }
  }
  // Stay until everyone is done: peers may still be waiting on our last writes' partners.
  if (auto done = b.allgather(all_members(b), "", 20000); !done)
    return report(b.rank(), "final barrier", done.err());
  return 0;
}

}  // namespace moerl::fabric::test
