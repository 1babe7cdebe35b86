// The plain-sgemm reference the grouped expert FFN is held to (target: the FFN at >= 80% of
// the GFLOP/s of one sgemm of equal FLOPs), run the two ways the same cores can run it.
#pragma once

#include <cstdint>

#include "kernels/thread_pool.h"

namespace moerl::bench {

// Row-major C [m, n] = A [m, k] * B [k, n].
struct sgemm_problem {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
};

// One cblas_sgemm call, parallelised by BLAS's own threads (as the process configured them).
void sgemm_blas_threads(const sgemm_problem& p);

// The columns of C split over the pool's threads, one single-threaded BLAS call each (the
// way the FFN runs its GEMMs); BLAS's thread count is restored afterwards.
void sgemm_pool_split(kernels::thread_pool& pool, const sgemm_problem& p);

}  // namespace moerl::bench
