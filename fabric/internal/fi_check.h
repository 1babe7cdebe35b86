// FI_CHECK: the one way moerl calls into libfabric. A failing call becomes a moerl::error
// naming the call, its libfabric message, and the file:line of the call site, returned
// from the enclosing function (which must return moerl::status or moerl::result<T>).
// Private to fabric/: nothing outside includes it.
#pragma once

#if !defined(MOERL_INSIDE_moerl_fabric)
#error "fabric/internal/fi_check.h is private to moerl_fabric (fabric/): include its public headers"
#endif

#include <string>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "common/error.h"

namespace moerl::fabric::detail {

inline error fi_call_error(const char* call, int rc, const char* file, int line) {
  return error{errc::fabric_error,
               std::string(call) + " failed: " + fi_strerror(rc < 0 ? -rc : rc) +
                   " (rc=" + std::to_string(rc) + ") at " + file + ":" + std::to_string(line)};
}

}  // namespace moerl::fabric::detail

// Evaluates `call` once; any negative return leaves the enclosing function with an error.
#define FI_CHECK(call)                                                                        \
  do {                                                                                        \
    const int fi_check_rc_ = static_cast<int>(call);                                          \
    if (fi_check_rc_ < 0)                                                                     \
      return ::moerl::fabric::detail::fi_call_error(#call, fi_check_rc_, __FILE__, __LINE__); \
  } while (0)
