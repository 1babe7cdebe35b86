// A shared library opened at its first use (dlopen) rather than at process start.
//
// Why: libfabric (Debian's links the PSM provider, whose libinfinipath calibrates the CPU
// clock with ~800 usleep calls in a constructor), cuBLAS (libcublasLt: 540 MB and ~400,000
// relocations) and NCCL made every `moerl` process take ~0.45 s to start, most of it before
// main(), although most processes (the coordinator, buffer shards, reward and env nodes, the
// CLI) never call them. Each of those libraries is linked through a small forwarding file
// (fabric/libfabric_on_demand.cpp, kernels/cuda/cublas_on_demand.cpp,
// fabric/nccl_on_demand.cpp) that defines the few entry points moerl calls and opens the real
// library the first time one of them runs. tests/common/on_demand_library_test checks the
// `moerl` binary names none of them as needed.
//
// Opening one keeps every signal's disposition as it was: a library's constructors may install
// handlers (libfabric's libinfinipath does, for SIGTERM among others), which would replace
// moerl's once the library opens after main() has set them.
//
// A library that cannot be opened (not installed, wrong version) is not an abort: symbol()
// returns null, each forwarding function returns its API's error code, and the first failure
// is logged once with dlerror's text and what needed the library.
#pragma once

#include <mutex>
#include <string>
#include <vector>

namespace moerl {

class on_demand_library {
 public:
  // `names`: what to try, in order: a soname (found through LD_LIBRARY_PATH, the cache and
  // the binary's RUNPATH), then paths known at build time. `what`: what moerl uses it for, for
  // the error ("the fabric (libfabric)").
  on_demand_library(std::vector<std::string> names, std::string what);
  ~on_demand_library();
  on_demand_library(const on_demand_library&) = delete;
  on_demand_library& operator=(const on_demand_library&) = delete;

  // The symbol's address (opening the library on first use), or null when the library or the
  // symbol is missing (logged once per library, and once per missing symbol).
  void* symbol(const char* name);
  // "" when the library is open; otherwise why it could not be opened (opens it if not tried).
  std::string load_error();
  // Which name opened it ("" when none did).
  std::string loaded_from();

 private:
  void open_once();

  const std::vector<std::string> names_;
  const std::string what_;
  std::once_flag opened_;
  void* handle_ = nullptr;
  std::string loaded_from_;
  std::string error_;
};

// The function `name` of `lib` as a pointer of type F (null when unavailable): used by the
// forwarding files, each caching its pointer in a function-local static.
template <class F>
F* on_demand_symbol(on_demand_library& lib, const char* name) {
  return reinterpret_cast<F*>(lib.symbol(name));
}

}  // namespace moerl
