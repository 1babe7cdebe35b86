// keep_freed_heap_for_reuse(): buffers of a step's size come from the heap and stay there
// after free. Each case runs in a fresh child process (a death test forks), so earlier
// allocations of the test binary cannot have moved glibc's dynamic thresholds.
#include "common/allocator_tuning.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr size_t kStepBuffer = 8u << 20;  // a per-step buffer: above glibc's 128 KiB default

// Exit code 0 when two step buffers were heap chunks (no mapping of their own) and their
// pages stayed in the heap's top after both were freed; 1 + which check failed otherwise.
[[noreturn]] void allocate_free_and_exit(bool tune) {
  if (tune && !moerl::keep_freed_heap_for_reuse()) std::_Exit(10);
  // volatile: the compiler may otherwise drop an allocation whose contents nobody reads.
  void* volatile a = std::malloc(kStepBuffer);
  void* volatile b = std::malloc(kStepBuffer);
  std::memset(a, 1, kStepBuffer);
  std::memset(b, 1, kStepBuffer);
  const size_t mapped_while_alive = mallinfo2().hblkhd;
  std::free(b);
  std::free(a);
  const size_t heap_after_free = mallinfo2().arena;  // bytes the heap holds from the kernel
  if (mapped_while_alive != 0) std::_Exit(11);
  if (heap_after_free < 2 * kStepBuffer) std::_Exit(12);
  std::_Exit(0);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizerAllocator = true;
#else
constexpr bool kSanitizerAllocator = false;
#endif

TEST(AllocatorTuning, StepBuffersStayInTheHeapAfterFree) {
  if (kSanitizerAllocator) GTEST_SKIP() << "the sanitizer's allocator ignores mallopt";
  EXPECT_EXIT(allocate_free_and_exit(true), testing::ExitedWithCode(0), "");
}

// The control: glibc's defaults give a fresh process's first step buffers mappings of their
// own, so the case above is not passing by default.
TEST(AllocatorTuning, DefaultsMapStepBuffersOfTheirOwn) {
  if (kSanitizerAllocator) GTEST_SKIP() << "the sanitizer's allocator ignores mallopt";
  EXPECT_EXIT(allocate_free_and_exit(false), testing::ExitedWithCode(11), "");
}

}  // namespace
