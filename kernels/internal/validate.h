// Private to kernels/: argument checks shared by the CPU primitives (and by the CUDA twins
// for what can be checked on the host). A failed check returns invalid_argument naming the
// function, the argument and the offending value.
#pragma once

#if !defined(MOERL_INSIDE_moerl_kernels) && !defined(MOERL_INSIDE_moerl_kernels_cuda)
#error \
    "kernels/internal/validate.h is private to moerl_kernels and moerl_kernels_cuda (kernels/): include its public headers"
#endif

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/copy_rows.h"
#include "kernels/dispatch_layout.h"
#include "kernels/expert_ffn.h"
#include "kernels/routing.h"

namespace moerl::kernels::detail {

template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Returns invalid_argument "<fn>: <message>" from the enclosing function when cond fails.
#define KERNELS_REQUIRE(cond, fn, ...)                                                \
  do {                                                                                \
    if (!(cond))                                                                      \
      return ::moerl::error(::moerl::errc::invalid_argument,                          \
                            ::moerl::kernels::detail::concat(fn, ": ", __VA_ARGS__)); \
  } while (0)

// routing_params are consistent (see kernels/routing.h) and num_tokens >= 0.
status check_routing_params(const char* fn, const routing_params& p, int64_t num_tokens);

// Every entry of a [num_tokens, topk] routing table is -1 or an expert id in [0, num_experts).
status check_topk_idx(const char* fn, const int64_t* topk_idx, int64_t num_tokens, int topk,
                      int num_experts);

// get_dispatch_layout's arguments, checked on the host by both twins (the CPU's and the
// CUDA one's, which passes device pointers: their nullness is all the host can see of them):
// consistent params, the required outputs, and a topk_idx whenever there are tokens. The
// table's values are the CPU twin's to check (check_topk_idx).
status check_dispatch_layout_args(const char* fn, const int64_t* topk_idx,
                                  const dispatch_layout_params& p, const dispatch_layout_out& out);

// Builds row_entry [num_rows]: the entry t * topk + k whose slot names the row, or -1 for a
// padding row. Fails on a slot outside [-1, num_rows) or a row named twice.
status invert_slots(const char* fn, const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                    int64_t num_rows, std::vector<int64_t>* row_entry);

// A row copy plan (kernels/copy_rows.h): num_copies >= 0, no negative byte count, no null
// pointer in a copy that moves bytes. The pointers themselves are not dereferenced.
status check_row_copies(const char* fn, const row_copy* copies, int64_t num_copies);

// The shape of a permute or combine: num_tokens >= 0, topk >= 1, hidden >= 1, num_rows >= 0.
status check_row_shape(const char* fn, int64_t num_tokens, int topk, int64_t hidden,
                       int64_t num_rows);

// An expert FFN's shape and its expert_offset [num_experts + 1], a host array (the CUDA twins
// read it on the host too): starts at 0, non-decreasing, and every GEMM dimension fits the
// int that BLAS and cuBLAS take.
status check_expert_ffn_shape(const char* fn, const expert_ffn_shape& s, const int64_t* offset);

// Slots are in [-1, num_rows) (no uniqueness check: for gathers that tolerate shared rows).
status check_slots(const char* fn, const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                   int64_t num_rows);

}  // namespace moerl::kernels::detail
