// Private to kernels/cpu: who parallelises a GEMM. A primitive that splits its GEMMs over
// its own thread_pool calls BLAS from every pool thread at once; a multithreaded OpenBLAS
// would then run a thread team per call on the same cores (its threaded GEMMs also take a
// process-wide lock, so concurrent calls queue). While a blas_single_thread object lives,
// OpenBLAS runs every call on the calling thread.
#pragma once

namespace moerl::kernels::detail {

// Scoped, reference counted across threads: the first live object saves OpenBLAS's thread
// count and sets it to 1, the last one to go restores it. The setting is process-wide, so
// BLAS calls made meanwhile by unrelated code also run on one thread (slower, never wrong);
// `moerl up` and `moerl learn` already run BLAS on one thread, where this does nothing.
class blas_single_thread {
 public:
  blas_single_thread();
  ~blas_single_thread();
  blas_single_thread(const blas_single_thread&) = delete;
  blas_single_thread& operator=(const blas_single_thread&) = delete;
};

}  // namespace moerl::kernels::detail
