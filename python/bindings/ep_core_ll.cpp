// DeepEP's low-latency calls on fabric's low-latency ep_group (python/README.md, "Low-latency
// calls"). DeepEP's layout is per local expert a block of num_ranks * max_tokens rows whose
// first recv_count rows are valid, grouped by source rank; the group's rows are ordered inside
// each local expert by (source rank, source token, k), which is that. So the channel's group
// runs with ep_config::ll_expert_stride = num_ranks * max_tokens: it places the received rows
// straight into the caller's recv_x (set_recv_rows), and its combine_buffer() has the same
// layout, so a combine's x goes to the group as it is (read in place by same-host sources
// when it is combine_buffer() itself). No row is copied here.
//
// As for the normal channels, dispatch and combine need not alternate here (DeepEP lets a
// caller hold two dispatches): a dispatch on an open channel first drops the open step's
// combine, and a combine whose routing is not the open one replays it from the topk_idx that
// DeepEP's combine takes anyway. The group's order is deterministic, so a replay puts every
// row where the handle says it is.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/status_try.h"
#include "kernels/dtypes.h"
#include "python/bindings/ep_core.h"
#include "python/bindings/ep_core_ll_channel.h"

namespace moerl::py {

namespace {

// DeepEP's topk_idx holds -1 (masked) or an expert id. Checked here rather than in Python,
// where it took four torch ops per call (a tenth of a decode step's overhead over the C++
// path), and before the channel is looked up: a channel's first use is collective, so a rank
// that fails must fail before it.
status check_topk_range(const int64_t* topk_idx, int64_t num_tokens, int topk, int num_experts) {
  for (int64_t i = 0; i < num_tokens * topk; ++i)
    if (topk_idx[i] < -1 || topk_idx[i] >= num_experts)
      return error{errc::invalid_argument, "topk_idx[" + std::to_string(i / topk) + ", " +
                                               std::to_string(i % topk) + "] is " +
                                               std::to_string(topk_idx[i]) +
                                               "; expected -1 (masked) or an expert id in [0, " +
                                               std::to_string(num_experts) + ")"};
  return {};
}

}  // namespace

ep_core::ll_key ep_core::ll_key_of(const ll_shape& shape) {
  return {
      static_cast<int>(shape.dtype), shape.hidden, shape.max_tokens, shape.num_experts, shape.topk,
      static_cast<int>(shape.memory)};
}

result<ep_core::ll_channel*> ep_core::ll_channel_for(const ll_shape& shape) {
  if (closed_) return error{errc::invalid_argument, "moerl.ep: this Buffer was destroyed"};
  const ll_key key = ll_key_of(shape);
  if (auto it = ll_channels_.find(key); it != ll_channels_.end()) return it->second.get();
  auto c = std::make_unique<ll_channel>();
  c->shape = shape;
  c->row_bytes = shape.hidden * static_cast<int64_t>(fabric::ep_dtype_size(shape.dtype));
  c->name = std::string("ll:") + (shape.dtype == fabric::ep_dtype::bf16 ? "bf16" : "fp32") + ":" +
            std::to_string(shape.hidden) + ":m" + std::to_string(shape.max_tokens) + ":e" +
            std::to_string(shape.num_experts) + ":k" + std::to_string(shape.topk) +
            (shape.memory == fabric::ep_memory::host
                 ? ""
                 : std::string(":") + fabric::ep_memory_name(shape.memory));
  fabric::ep_config cfg;
  cfg.mode = fabric::ep_mode::low_latency;
  cfg.num_experts = shape.num_experts;
  cfg.topk = shape.topk;
  cfg.hidden = shape.hidden;
  cfg.dtype = shape.dtype;
  cfg.max_tokens_per_rank = std::max<int64_t>(shape.max_tokens, 1);
  cfg.memory = shape.memory;
  cfg.ll_expert_stride = ll_block(shape);
  auto g = make_group(cfg);
  if (!g)
    return error{g.err().code,
                 "moerl.ep: creating the " + c->name + " channel: " + g.err().message};
  c->group = std::move(*g);
  // Every low-latency combine returns a new [num_tokens, hidden] tensor from blocks_. With a
  // Buffer built without num_nvl_bytes/num_rdma_bytes (moerl's LL channels size their own
  // regions) the pool kept none, so each one was a fresh mapping whose pages faulted and were
  // zeroed in the combine's reduction, and unmapped when dropped: 0.1-0.3 ms of a decode
  // step the C++ path does not pay. Two per channel: the caller usually still holds the last
  // step's output (its next layer's input) when the next combine asks for one.
  blocks_->raise_cache_limit(cfg.max_tokens_per_rank * c->row_bytes, 2);
  ll_channel* raw = c.get();
  ll_channels_.emplace(key, std::move(c));
  return raw;
}

result<std::string> ep_core::ll_prepare(const ll_shape& shape) {
  auto c = ll_channel_for(shape);
  if (c) return std::string();
  return device_refusal(c.err(), shape.memory);
}

int64_t ep_core::ll_block(const ll_shape& shape) const {
  return opt_.num_ranks * std::max<int64_t>(shape.max_tokens, 1);
}

status ep_core::ll_close_step(ll_channel& c) {
  if (!c.open) return {};
  c.open = false;
  ASSIGN_OR_RETURN(void* y,
                   c.scratch.get(c.memory(), std::max<int64_t>(c.num_tokens, 1) * c.row_bytes));
  return c.group->combine(*c.out, c.group->combine_buffer(), y);
}

result<void*> ep_core::ll_recv_scratch(ll_channel& c) {
  return c.recv_scratch.get(c.memory(),
                            c.group->num_local_experts() * ll_block(c.shape) * c.row_bytes);
}

// After ll_close_step; the group puts the received rows into recv_rows (DeepEP's layout). The
// tokens are whatever the caller put into dispatch_buffer() (a replay leaves an old step's
// there, and its rows go to ll_recv_scratch: only the routing matters then).
status ep_core::ll_open_step(ll_channel& c, const int64_t* topk_idx, int64_t num_tokens,
                             int64_t routing_id, void* recv_rows) {
  const size_t entries = static_cast<size_t>(num_tokens * c.shape.topk);
  c.idx.assign(topk_idx, topk_idx + entries);
  c.weights.assign(entries, 0.0f);
  STATUS_TRY(c.group->set_recv_rows(recv_rows));
  ASSIGN_OR_RETURN(c.out, c.group->dispatch(c.group->dispatch_buffer(), c.idx.data(),
                                            c.weights.data(), num_tokens));
  c.open = true;
  c.routing_id = routing_id;
  c.num_tokens = num_tokens;
  return {};
}

// The fp8 dispatch's valid rows (o's, in the block layout at `rows`: row i of local expert j
// at j * block + i; device memory for a cuda channel) -> e4m3 q at the same place and each
// expert's column-major scales [num_blocks][block] (row i of block b at scales[b * block + i]).
// A token with several experts on this rank arrived once per expert, the same bytes each
// time, and quantising is a function of the row, so each (source rank, source token) is
// quantised once and its codes and scales are copied to its other rows: topk / ranks fewer
// quantisations on the decode shape. One parallel_for over the distinct rows: two calls per
// expert (the bf16 conversion, fp8_quantize) cost a pool wake-up each (256 per dispatch at 2
// ranks, most of its 30-58 ms on a 2-core box where the worker waits for a core); the nested
// calls inside it run inline.
status ep_core::ll_quantize(ll_channel& c, const fabric::dispatch_output& o, const char* rows,
                            uint8_t* q, float* scales) {
  const ll_shape& shape = c.shape;
  const int num_local = c.group->num_local_experts();
  const int64_t block = ll_block(shape), hidden = shape.hidden,
                nb = kernels::fp8_num_blocks(hidden);
  const int64_t num_rows = o.expert_offset[num_local],
                max_tokens = std::max<int64_t>(shape.max_tokens, 1);
  if (num_rows == 0) return {};
  const char* host = rows;
  if (c.memory() == fabric::memory_kind::cuda) {  // the CPU twin quantises: the rows to host once
    c.host_rows.resize(static_cast<size_t>(num_rows * c.row_bytes));
    for (int j = 0; j < num_local; ++j) {
      const int64_t first = o.expert_offset[j], count = o.expert_offset[j + 1] - first;
      if (count > 0)
        STATUS_TRY(fabric::device_copy(c.host_rows.data() + first * c.row_bytes,
                                       rows + j * block * c.row_bytes,
                                       static_cast<size_t>(count * c.row_bytes)));
    }
    host = c.host_rows.data();
  }
  // Where row r (o's numbering) is read: compact on the host copy, else the block layout.
  std::vector<int64_t> at(static_cast<size_t>(num_rows)), block_row(static_cast<size_t>(num_rows));
  for (int j = 0; j < num_local; ++j)
    for (int64_t r = o.expert_offset[j]; r < o.expert_offset[j + 1]; ++r) {
      block_row[r] = j * block + (r - o.expert_offset[j]);
      at[r] = host == rows ? block_row[r] : r;
    }
  // The distinct (source, token) rows, and each row's.
  std::vector<int64_t> unique_of(static_cast<size_t>(opt_.num_ranks * max_tokens), -1);
  std::vector<int64_t> unique_row, row_unique(static_cast<size_t>(num_rows));
  for (int64_t r = 0; r < num_rows; ++r) {
    int64_t& u = unique_of[o.src_rank[r] * max_tokens + o.src_token[r]];
    if (u < 0) {
      u = static_cast<int64_t>(unique_row.size());
      unique_row.push_back(r);
    }
    row_unique[r] = u;
  }
  fp8_scales_.resize(unique_row.size() * static_cast<size_t>(nb));
  const bool bf16 = shape.dtype == fabric::ep_dtype::bf16;
  status failed = {};
  std::mutex failed_mutex;
  pool_.parallel_for(static_cast<int64_t>(unique_row.size()), [&](int64_t b, int64_t e) {
    std::vector<float> staged(bf16 ? static_cast<size_t>(hidden) : 0);
    for (int64_t u = b; u < e; ++u) {
      const int64_t r = unique_row[u];
      const char* src = host + at[r] * c.row_bytes;
      const float* x = reinterpret_cast<const float*>(src);
      status st = {};
      if (bf16) {
        st = kernels::bf16_to_float(pool_, reinterpret_cast<const kernels::bf16*>(src), hidden,
                                    staged.data());
        x = staged.data();
      }
      if (st)
        st = kernels::fp8_quantize(pool_, x, 1, hidden, q + block_row[r] * hidden,
                                   fp8_scales_.data() + u * nb);
      if (!st) {
        std::lock_guard<std::mutex> lock(failed_mutex);
        if (failed) failed = st;
        return;
      }
    }
  });
  if (!failed) return failed;
  for (int j = 0; j < num_local; ++j)
    for (int64_t r = o.expert_offset[j]; r < o.expert_offset[j + 1]; ++r) {
      const int64_t u = row_unique[r], i = r - o.expert_offset[j], from = unique_row[u];
      if (from != r)
        std::memcpy(q + block_row[r] * hidden, q + block_row[from] * hidden,
                    static_cast<size_t>(hidden));
      for (int64_t b = 0; b < nb; ++b) scales[(j * nb + b) * block + i] = fp8_scales_[u * nb + b];
    }
  return {};
}

status ep_core::ll_dispatch(const ll_shape& shape, const void* x, const int64_t* topk_idx,
                            int64_t num_tokens, int64_t routing_id, void* recv_x,
                            int32_t* recv_count, int32_t* src_info, int64_t* layout_range,
                            ll_fp8_out fp8) {
  STATUS_TRY(check_topk_range(topk_idx, num_tokens, shape.topk, shape.num_experts));
  ASSIGN_OR_RETURN(ll_channel * c, ll_channel_for(shape));
  STATUS_TRY(ll_close_step(*c));
  // The tokens go through the group's own buffer: the group reads them until combine_recv
  // (the caller's x need not live that long), and same-host peers read them there in place.
  // Unless they are there already (ll_dispatch_buffer()): then nothing is copied, as in the
  // C++ path whose layer writes its tokens there.
  auto* own = static_cast<char*>(c->group->dispatch_buffer());
  const auto* in = static_cast<const char*>(x);
  const auto bytes = static_cast<size_t>(num_tokens * c->row_bytes);
  if (num_tokens > 0 && in != own) {
    // Rows of that buffer other than its first (a slice of ll_dispatch_buffer()'s tensor not
    // at its start) overlap where they go.
    const auto own_bytes =
        static_cast<size_t>(std::max<int64_t>(shape.max_tokens, 1) * c->row_bytes);
    if (c->memory() != fabric::memory_kind::cuda && in < own + own_bytes && own < in + bytes)
      std::memmove(own, in, bytes);
    else
      STATUS_TRY(fabric::memory_copy(c->memory(), own, x, bytes));
  }
  // fp8 quantises from the channel's own rows; the others land in the caller's recv_x.
  void* rows_out = recv_x;
  if (fp8.q) {
    ASSIGN_OR_RETURN(rows_out, ll_recv_scratch(*c));
  }
  STATUS_TRY(ll_open_step(*c, topk_idx, num_tokens, routing_id, rows_out));

  const fabric::dispatch_output& o = *c->out;
  const int n = opt_.num_ranks, num_local = c->group->num_local_experts();
  const int64_t block = ll_block(shape);
  std::fill(layout_range, layout_range + int64_t{num_local} * n, int64_t{0});
  for (int j = 0; j < num_local; ++j) {
    const int64_t first = o.expert_offset[j], count = o.expert_offset[j + 1] - first;
    if (count > block)  // a token naming one expert twice in its top-k (the group kept block)
      return error{errc::invalid_argument,
                   "moerl.ep: local expert " + std::to_string(j) + " received " +
                       std::to_string(count) + " rows; at most num_ranks * " +
                       "num_max_dispatch_tokens_per_rank = " + std::to_string(block) +
                       " fit (does a token name one expert twice in topk_idx?)"};
    recv_count[j] = static_cast<int32_t>(count);
    for (int64_t i = 0; i < count; ++i) {
      const int s = o.src_rank[first + i];
      src_info[j * block + i] = o.src_token[first + i];
      int64_t& range = layout_range[j * n + s];
      if (range == 0) range = i << 32;  // rows of one source are contiguous
      ++range;
    }
  }
  if (fp8.q) STATUS_TRY(ll_quantize(*c, o, static_cast<const char*>(o.recv_x), fp8.q, fp8.scales));
  return {};
}

status ep_core::ll_combine(const ll_shape& shape, const void* x, const int64_t* topk_idx,
                           const float* topk_weights, int64_t num_tokens, int64_t routing_id,
                           void* y) {
  STATUS_TRY(check_topk_range(topk_idx, num_tokens, shape.topk, shape.num_experts));
  ASSIGN_OR_RETURN(ll_channel * c, ll_channel_for(shape));
  const size_t entries = static_cast<size_t>(num_tokens * shape.topk);
  if (c->open && c->routing_id == routing_id) {
    if (c->num_tokens != num_tokens || !std::equal(c->idx.begin(), c->idx.end(), topk_idx))
      return error{errc::invalid_argument,
                   "moerl.ep: topk_idx differs from the one the handle's low_latency_dispatch "
                   "was given"};
  } else {
    STATUS_TRY(ll_close_step(*c));
    ASSIGN_OR_RETURN(void* scratch, ll_recv_scratch(*c));
    STATUS_TRY(ll_open_step(*c, topk_idx, num_tokens, routing_id, scratch));
  }
  // x is in the group's layout already: the group reads it during the call (copying each row
  // to its source), or, when it is combine_buffer(), its same-host sources read it in place.
  std::copy(topk_weights, topk_weights + entries, c->weights.begin());
  c->open = false;
  return c->group->combine(*c->out, x, y);
}

void* ep_core::ll_combine_buffer(const ll_shape& shape, int64_t routing_id) {
  auto it = ll_channels_.find(ll_key_of(shape));
  if (closed_ || it == ll_channels_.end()) return nullptr;
  const ll_channel& c = *it->second;
  if (!c.open || c.routing_id != routing_id || c.memory() == fabric::memory_kind::cuda)
    return nullptr;
  return c.group->combine_buffer();
}

void* ep_core::ll_dispatch_buffer(const ll_shape& shape) {
  auto it = ll_channels_.find(ll_key_of(shape));
  if (closed_ || it == ll_channels_.end()) return nullptr;
  ll_channel& c = *it->second;
  if (c.open || c.memory() == fabric::memory_kind::cuda) return nullptr;
  return c.group->dispatch_buffer();
}

status ep_core::ll_clean() {
  for (auto& [key, c] : ll_channels_) STATUS_TRY(ll_close_step(*c));
  return {};
}

}  // namespace moerl::py
