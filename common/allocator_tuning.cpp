#include "common/allocator_tuning.h"

#include <malloc.h>

namespace moerl {

bool keep_freed_heap_for_reuse() {
  // Setting either threshold explicitly also turns off glibc's dynamic adjustment of both,
  // which is what let the thresholds follow the step's buffers up and down.
  constexpr int kMmapThresholdBytes = 32 << 20;
  constexpr int kTrimThresholdBytes = 64 << 20;
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) == 1;
  return mmap_ok && trim_ok;
}

}  // namespace moerl
