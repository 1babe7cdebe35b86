// The CPU twin of the batched row copies (kernels/copy_rows.h).
#include "kernels/copy_rows.h"

#include <cstring>

#include "kernels/internal/validate.h"

namespace moerl::kernels {

status copy_rows(thread_pool& /*pool*/, const row_copy* copies, int64_t num_copies) {
  if (auto st = detail::check_row_copies("copy_rows", copies, num_copies); !st) return st;
  // One thread: the plans are a few thousand rows of a few KiB, which memcpy moves faster
  // than waking the pool would take.
  for (int64_t i = 0; i < num_copies; ++i)
    if (copies[i].bytes > 0)
      std::memcpy(copies[i].dst, copies[i].src, static_cast<size_t>(copies[i].bytes));
  return ok_status();
}

}  // namespace moerl::kernels
