// Device (CUDA) memory for the expert plane's transport: what a region in GPU memory needs
// that a host region does not (fabric/DEVICE_MEMORY.md). Allocation, the CUDA IPC handle a
// same-host peer opens to write into it, and the copies that replace memcpy when either
// side is device memory. Every function works in every build: without CUDA
// (MOERL_HAVE_CUDA off) or without a visible device each returns an error that says which,
// so a caller never has to ask first.
//
// Fork: CUDA cannot be used in a child whose parent already initialised it. Tests that fork
// ranks (bootstrap.h's launch_processes) ask device_count() from a child, never the parent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"

namespace moerl::fabric {

// Where a registered region's bytes live.
enum class memory_kind : uint8_t { host = 0, cuda = 1 };
const char* memory_kind_name(memory_kind k);  // "host", "cuda"

// True when this moerl was built with CUDA (MOERL_HAVE_CUDA).
bool cuda_build();

// Devices visible to this process: an error when the build has no CUDA, when there is no
// driver, or when no device is visible (each message says which).
result<int> device_count();

// The bytes of a cudaIpcMemHandle_t (64 in every CUDA release so far; checked at compile
// time where CUDA is built).
constexpr size_t kIpcHandleBytes = 64;

// A zeroed device allocation on the current device, with its IPC handle.
struct device_allocation {
  void* ptr = nullptr;
  size_t size = 0;
  int device = -1;
  unsigned char ipc_handle[kIpcHandleBytes] = {};
};
result<device_allocation> device_allocate(size_t size);
void device_free(void* ptr);  // nothing for nullptr; errors are logged (nobody to return to)

// A same-host peer's allocation opened through its IPC handle (cudaIpcOpenMemHandle; the
// same process must use the owner's pointer instead: CUDA refuses to open its own handles).
result<void*> device_ipc_open(const unsigned char (&handle)[kIpcHandleBytes]);
void device_ipc_close(void* ptr);

// Copies len bytes between any two of host memory, this process's device memory and
// opened IPC memory (cudaMemcpy with cudaMemcpyDefault: unified addressing decides the
// direction), and waits for it: the bytes are in place when it returns, which is what the
// transport's notify() after it relies on (PROTOCOL.md, "Same host", point 1).
status device_copy(void* dst, const void* src, size_t len);

// Copies len bytes where the memory kind says: memcpy for host memory, device_copy for cuda
// (either end may be device memory then). For callers that hold payload of either kind (the
// EP tests, moerl.ep's low-latency channels) and would otherwise branch at every copy.
status memory_copy(memory_kind where, void* dst, const void* src, size_t len);

}  // namespace moerl::fabric
