#include "bench/kernels/sgemm_reference.h"

#include <cblas.h>

namespace moerl::bench {

namespace {
void sgemm_columns(const sgemm_problem& p, int64_t c0, int64_t c1) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(p.m),
              static_cast<int>(c1 - c0), static_cast<int>(p.k), 1.0f, p.a, static_cast<int>(p.k),
              p.b + c0, static_cast<int>(p.n), 0.0f, p.c + c0, static_cast<int>(p.n));
}
}  // namespace

void sgemm_blas_threads(const sgemm_problem& p) { sgemm_columns(p, 0, p.n); }

void sgemm_pool_split(kernels::thread_pool& pool, const sgemm_problem& p) {
  const int parts = pool.num_threads();
  const int saved = openblas_get_num_threads();
  if (parts > 1) openblas_set_num_threads(1);
  pool.parallel_for(parts, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      // Column boundaries on multiples of 16, as the FFN splits.
      auto edge = [&](int64_t i) { return i >= parts ? p.n : p.n * i / parts / 16 * 16; };
      if (edge(q) < edge(q + 1)) sgemm_columns(p, edge(q), edge(q + 1));
    }
  });
  if (parts > 1) openblas_set_num_threads(saved);
}

}  // namespace moerl::bench
