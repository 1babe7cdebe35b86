// Who parallelises a GEMM. Code that calls BLAS from several threads at once (a kernels
// primitive splitting its GEMMs over its own thread_pool, the expert-parallel rank threads of
// job/rank_threads.h) must not let a multithreaded OpenBLAS run a thread team per call on the
// same cores: its threaded GEMMs take a process-wide lock, so concurrent calls queue, and the
// queued callers spin in exec_blas_async (fabric/PERF.md, "EP trainer step"). While a
// blas_single_thread object lives, OpenBLAS runs every call on the calling thread.
#pragma once

namespace moerl::kernels {

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

}  // namespace moerl::kernels
