#include "kernels/blas_threads.h"

#include <cblas.h>

#include <mutex>

namespace moerl::kernels {

namespace {
std::mutex g_mutex;
int g_holders = 0;  // live blas_single_thread objects
int g_saved = 1;    // OpenBLAS's thread count before the first of them
}  // namespace

blas_single_thread::blas_single_thread() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_holders++ == 0) {
    g_saved = openblas_get_num_threads();
    if (g_saved != 1) openblas_set_num_threads(1);
  }
}

blas_single_thread::~blas_single_thread() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_holders == 0 && g_saved != 1) openblas_set_num_threads(g_saved);
}

}  // namespace moerl::kernels
