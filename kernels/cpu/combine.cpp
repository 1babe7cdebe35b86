#include "kernels/combine.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/internal/row_ops.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels {

using detail::check_row_shape;

namespace {

// detail::reduce_rows<true> for bf16 rows and output, 32 elements per step in 8-lane vectors:
// per element the same sequence of fp32 operations (each term widened exactly, acc = acc + w *
// v from 0 in term order, one rounding by float_to_bf16's rule), so bitwise the same result.
// Built twice (target_clones) and picked when the library loads: AVX2 where the CPU has it,
// twice the lanes of the baseline ISA's SSE2 (the 2-rank prefill combine spent 25% of its CPU
// here), the baseline elsewhere. Neither clone may contract into FMA (that rounds once where
// this rounds twice): "avx2" does not enable FMA. Vectors stay inside this function (no
// vector arguments or returns, whose ABI differs between the clones).
__attribute__((target_clones("avx2", "default"))) void reduce_bf16_rows(const bf16* const* src,
                                                                        const float* w, int n,
                                                                        int64_t len, bf16* out) {
  typedef float v8f32 __attribute__((vector_size(32)));
  typedef uint32_t v8u32 __attribute__((vector_size(32)));
  typedef int32_t v8i32 __attribute__((vector_size(32)));
  typedef uint16_t v8u16 __attribute__((vector_size(16)));
  int64_t i = 0;
  for (; i + 32 <= len; i += 32) {
    v8f32 acc[4] = {};
    for (int j = 0; j < n; ++j)
      for (int q = 0; q < 4; ++q) {
        v8u16 h;
        std::memcpy(&h, src[j] + i + 8 * q, sizeof h);
        const v8u32 u = __builtin_convertvector(h, v8u32) << 16;
        v8f32 v;
        std::memcpy(&v, &u, sizeof v);
        acc[q] += w[j] * v;
      }
    for (int q = 0; q < 4; ++q) {
      v8u32 u;
      std::memcpy(&u, &acc[q], sizeof u);
      const v8u32 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      const v8u32 quiet_nan = (u >> 16) | 0x40u;
      const v8i32 is_nan = (u & 0x7fffffffu) > 0x7f800000u;
      const v8u32 bits = is_nan ? quiet_nan : rounded;
      const v8u16 h = __builtin_convertvector(bits, v8u16);
      std::memcpy(static_cast<void*>(out + i + 8 * q), &h, sizeof h);
    }
  }
  detail::reduce_rows_tail<true>(src, w, n, i, len, out);
}

// out[t] = sum over k of w[t, k] * row_of(t, k) (nullptr: no term), k ascending: the
// documented fixed accumulation order, one thread per output row. Both forward entry points
// (slots into one buffer, row pointers) are this loop.
template <class T, class RowOf>
void weighted_terms_reduce(thread_pool& pool, RowOf row_of, const float* w, int64_t num_tokens,
                           int topk, int64_t hidden, T* out) {
  pool.parallel_for(
      num_tokens,
      [&](int64_t b, int64_t e) {
        std::vector<const T*> rows(topk);
        std::vector<float> weights(topk);
        for (int64_t t = b; t < e; ++t) {
          int n = 0;
          for (int k = 0; k < topk; ++k) {
            const T* row = row_of(t, k);
            if (!row) continue;
            rows[n] = row;
            weights[n++] = w[t * topk + k];
          }
          if constexpr (std::is_same_v<T, bf16>)
            reduce_bf16_rows(rows.data(), weights.data(), n, hidden, out + t * hidden);
          else
            detail::reduce_rows<true>(rows.data(), weights.data(), n, hidden, out + t * hidden);
        }
      },
      detail::row_ops_min_rows(hidden) / topk + 1);
}

template <class T>
status combine_fwd(thread_pool& pool, const T* expert_out, const int64_t* slot, const float* w,
                   int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows, T* out) {
  const char* fn = "combine_forward";
  if (auto st = check_row_shape(fn, num_tokens, topk, hidden, num_rows); !st) return st;
  if (auto st = detail::check_slots(fn, slot, num_tokens, topk, num_rows); !st) return st;
  auto row_of = [&](int64_t t, int k) -> const T* {
    const int64_t s = slot[t * topk + k];
    return s < 0 ? nullptr : expert_out + s * hidden;
  };
  weighted_terms_reduce(pool, row_of, w, num_tokens, topk, hidden, out);
  return ok_status();
}

template <class T>
status combine_rows_fwd(thread_pool& pool, const T* const* term_rows, const float* w,
                        int64_t num_tokens, int width, int64_t hidden, T* out) {
  if (auto st = check_row_shape("combine_rows_forward", num_tokens, width, hidden, 0); !st)
    return st;
  if (num_tokens > 0 && (!term_rows || !w || !out))
    return error{errc::invalid_argument, "combine_rows_forward: null input"};
  auto row_of = [&](int64_t t, int k) { return term_rows[t * width + k]; };
  weighted_terms_reduce(pool, row_of, w, num_tokens, width, hidden, out);
  return ok_status();
}

template <class T>
status combine_bwd(thread_pool& pool, const T* grad_out, const T* expert_out, const int64_t* slot,
                   const float* w, int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                   T* grad_expert_out, float* grad_w) {
  const char* fn = "combine_backward";
  if (auto st = check_row_shape(fn, num_tokens, topk, hidden, num_rows); !st) return st;
  std::vector<int64_t> row_entry;
  if (auto st = detail::invert_slots(fn, slot, num_tokens, topk, num_rows, &row_entry); !st)
    return st;
  // One pass per token: its gradient row is read once while still in cache for both the
  // weight gradients (dot products) and its top-k rows of grad_expert_out. Slots are unique
  // (checked above), so tokens write disjoint rows.
  pool.parallel_for(
      num_tokens,
      [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const T* g = grad_out + t * hidden;
          for (int k = 0; k < topk; ++k) {
            const int64_t i = t * topk + k, s = slot[i];
            if (s < 0) {
              grad_w[i] = 0.0f;
              continue;
            }
            grad_w[i] = detail::dot_row(g, expert_out + s * hidden, hidden);
            detail::scale_row(grad_expert_out + s * hidden, w[i], g, hidden);
          }
        }
      },
      detail::row_ops_min_rows(hidden) / topk + 1);
  // Padding rows (expert alignment) receive no gradient.
  pool.parallel_for(
      num_rows,
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          if (row_entry[r] < 0) detail::zero_row(grad_expert_out + r * hidden, hidden);
      },
      1024);
  return ok_status();
}

}  // namespace

status combine_forward(thread_pool& pool, const float* expert_out, const int64_t* token_expert_slot,
                       const float* topk_weights, int64_t num_tokens, int topk, int64_t hidden,
                       int64_t num_rows, float* out) {
  return combine_fwd(pool, expert_out, token_expert_slot, topk_weights, num_tokens, topk, hidden,
                     num_rows, out);
}
status combine_forward(thread_pool& pool, const bf16* expert_out, const int64_t* token_expert_slot,
                       const float* topk_weights, int64_t num_tokens, int topk, int64_t hidden,
                       int64_t num_rows, bf16* out) {
  return combine_fwd(pool, expert_out, token_expert_slot, topk_weights, num_tokens, topk, hidden,
                     num_rows, out);
}
status combine_rows_forward(thread_pool& pool, const float* const* term_rows, const float* weights,
                            int64_t num_tokens, int width, int64_t hidden, float* out) {
  return combine_rows_fwd(pool, term_rows, weights, num_tokens, width, hidden, out);
}
status combine_rows_forward(thread_pool& pool, const bf16* const* term_rows, const float* weights,
                            int64_t num_tokens, int width, int64_t hidden, bf16* out) {
  return combine_rows_fwd(pool, term_rows, weights, num_tokens, width, hidden, out);
}
status combine_backward(thread_pool& pool, const float* grad_out, const float* expert_out,
                        const int64_t* token_expert_slot, const float* topk_weights,
                        int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                        float* grad_expert_out, float* grad_topk_weights) {
  return combine_bwd(pool, grad_out, expert_out, token_expert_slot, topk_weights, num_tokens, topk,
                     hidden, num_rows, grad_expert_out, grad_topk_weights);
}
status combine_backward(thread_pool& pool, const bf16* grad_out, const bf16* expert_out,
                        const int64_t* token_expert_slot, const float* topk_weights,
                        int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                        bf16* grad_expert_out, float* grad_topk_weights) {
  return combine_bwd(pool, grad_out, expert_out, token_expert_slot, topk_weights, num_tokens, topk,
                     hidden, num_rows, grad_expert_out, grad_topk_weights);
}

}  // namespace moerl::kernels
