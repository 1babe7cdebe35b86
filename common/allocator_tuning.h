// Process-wide malloc settings for moerl's processes, set once at the start of main().
#pragma once

namespace moerl {

// Keeps the per-step buffers of the policy and the planes (activations, gradients, sample
// batches: tens of KiB to a few MiB, allocated and freed every iteration) in the heap
// instead of giving their pages back to the kernel at each free. With glibc's defaults
// (a dynamic mmap threshold and a trim threshold at twice it) the heap's top was trimmed
// and grown again every step, and each step re-faulted its pages: `moerl learn`'s 800
// iterations took 4.3 M minor faults and 10 s of system time out of 29 s. Allocations of
// 32 MiB and more still get their own mapping and go back at free; at most 64 MiB of free
// heap top is kept. Returns false where the C library refused a setting (nothing else changes).
bool keep_freed_heap_for_reuse();

}  // namespace moerl
