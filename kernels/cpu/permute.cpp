#include "kernels/permute.h"

#include <algorithm>
#include <vector>

#include "kernels/internal/row_ops.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels {

using detail::check_row_shape;

namespace {

using detail::row_ops_min_rows;

// Row-parallel gather: dst row r comes from src row pick(row_entry[r]), or is zero.
template <class T, class Pick>
void gather_rows(thread_pool& pool, const std::vector<int64_t>& row_entry, const T* src,
                 int64_t hidden, T* dst, Pick pick) {
  pool.parallel_for(
      static_cast<int64_t>(row_entry.size()),
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const int64_t entry = row_entry[r];
          if (entry >= 0)
            detail::copy_row(dst + r * hidden, src + pick(entry) * hidden, hidden);
          else
            detail::zero_row(dst + r * hidden, hidden);
        }
      },
      row_ops_min_rows(hidden));
}

template <class T>
status permute_fwd(thread_pool& pool, const T* x, const int64_t* slot, int64_t num_tokens, int topk,
                   int64_t hidden, int64_t num_rows, T* permuted) {
  const char* fn = "permute_forward";
  if (auto st = check_row_shape(fn, num_tokens, topk, hidden, num_rows); !st) return st;
  std::vector<int64_t> row_entry;
  if (auto st = detail::invert_slots(fn, slot, num_tokens, topk, num_rows, &row_entry); !st)
    return st;
  gather_rows(pool, row_entry, x, hidden, permuted, [topk](int64_t entry) { return entry / topk; });
  return ok_status();
}

template <class T>
status permute_bwd(thread_pool& pool, const T* grad_permuted, const int64_t* slot,
                   int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows, T* grad_x) {
  const char* fn = "permute_backward";
  if (auto st = check_row_shape(fn, num_tokens, topk, hidden, num_rows); !st) return st;
  if (auto st = detail::check_slots(fn, slot, num_tokens, topk, num_rows); !st) return st;
  pool.parallel_for(
      num_tokens,
      [&](int64_t b, int64_t e) {
        std::vector<const T*> rows(topk);
        for (int64_t t = b; t < e; ++t) {
          int n = 0;
          for (int k = 0; k < topk; ++k)
            if (slot[t * topk + k] >= 0) rows[n++] = grad_permuted + slot[t * topk + k] * hidden;
          detail::reduce_rows<false>(rows.data(), nullptr, n, hidden, grad_x + t * hidden);
        }
      },
      row_ops_min_rows(hidden));
  return ok_status();
}

template <class T>
status unpermute_fwd(thread_pool& pool, const T* permuted, const int64_t* slot, int64_t num_tokens,
                     int topk, int64_t hidden, int64_t num_rows, T* unpermuted) {
  const char* fn = "unpermute_forward";
  if (auto st = check_row_shape(fn, num_tokens, topk, hidden, num_rows); !st) return st;
  if (auto st = detail::check_slots(fn, slot, num_tokens, topk, num_rows); !st) return st;
  pool.parallel_for(
      num_tokens * topk,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          if (slot[i] >= 0)
            detail::copy_row(unpermuted + i * hidden, permuted + slot[i] * hidden, hidden);
          else
            detail::zero_row(unpermuted + i * hidden, hidden);
        }
      },
      row_ops_min_rows(hidden));
  return ok_status();
}

template <class T>
status unpermute_bwd(thread_pool& pool, const T* grad_unpermuted, const int64_t* slot,
                     int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                     T* grad_permuted) {
  const char* fn = "unpermute_backward";
  if (auto st = check_row_shape(fn, num_tokens, topk, hidden, num_rows); !st) return st;
  std::vector<int64_t> row_entry;
  if (auto st = detail::invert_slots(fn, slot, num_tokens, topk, num_rows, &row_entry); !st)
    return st;
  gather_rows(pool, row_entry, grad_unpermuted, hidden, grad_permuted,
              [](int64_t entry) { return entry; });
  return ok_status();
}

}  // namespace

status permute_forward(thread_pool& pool, const float* x, const int64_t* token_expert_slot,
                       int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                       float* permuted) {
  return permute_fwd(pool, x, token_expert_slot, num_tokens, topk, hidden, num_rows, permuted);
}
status permute_forward(thread_pool& pool, const bf16* x, const int64_t* token_expert_slot,
                       int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                       bf16* permuted) {
  return permute_fwd(pool, x, token_expert_slot, num_tokens, topk, hidden, num_rows, permuted);
}
status permute_backward(thread_pool& pool, const float* grad_permuted,
                        const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                        int64_t hidden, int64_t num_rows, float* grad_x) {
  return permute_bwd(pool, grad_permuted, token_expert_slot, num_tokens, topk, hidden, num_rows,
                     grad_x);
}
status permute_backward(thread_pool& pool, const bf16* grad_permuted,
                        const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                        int64_t hidden, int64_t num_rows, bf16* grad_x) {
  return permute_bwd(pool, grad_permuted, token_expert_slot, num_tokens, topk, hidden, num_rows,
                     grad_x);
}
status unpermute_forward(thread_pool& pool, const float* permuted, const int64_t* token_expert_slot,
                         int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                         float* unpermuted) {
  return unpermute_fwd(pool, permuted, token_expert_slot, num_tokens, topk, hidden, num_rows,
                       unpermuted);
}
status unpermute_forward(thread_pool& pool, const bf16* permuted, const int64_t* token_expert_slot,
                         int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                         bf16* unpermuted) {
  return unpermute_fwd(pool, permuted, token_expert_slot, num_tokens, topk, hidden, num_rows,
                       unpermuted);
}
status unpermute_backward(thread_pool& pool, const float* grad_unpermuted,
                          const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                          int64_t hidden, int64_t num_rows, float* grad_permuted) {
  return unpermute_bwd(pool, grad_unpermuted, token_expert_slot, num_tokens, topk, hidden, num_rows,
                       grad_permuted);
}
status unpermute_backward(thread_pool& pool, const bf16* grad_unpermuted,
                          const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                          int64_t hidden, int64_t num_rows, bf16* grad_permuted) {
  return unpermute_bwd(pool, grad_unpermuted, token_expert_slot, num_tokens, topk, hidden, num_rows,
                       grad_permuted);
}

}  // namespace moerl::kernels
