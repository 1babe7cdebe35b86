// POSIX_CHECK: the one check for POSIX calls (files, fork/exec, signals, waitpid), in the
// family of FI_CHECK, CUDA_CHECK and ZMQ_CHECK. A call that returns -1 makes the enclosing
// function (returning status or result<T>) return a moerl::error naming what it acted on, the
// call, errno's text, and the source file and line.
//
// errno -> errc, the same everywhere: ENOENT and ENOTDIR (a path or a leading part of it is
// absent) and ESRCH (no such process) become errc::not_found, so callers can tell "absent" or
// "already gone" from "broken"; every other errno is errc::io_error.
#pragma once

#include <cerrno>
#include <string>

#include "common/error.h"

namespace moerl::detail {

errc errc_from_errno(int err);
error posix_error(const char* call, const std::string& what, const char* file, int line, int err);

}  // namespace moerl::detail

// `call` may be an assignment (fd = ::open(...)); its value is compared with -1.
#define POSIX_CHECK(call, what) POSIX_CHECK_IMPL(call, #call, 0, what)

// The same, but a failure with errno == `tolerated` (e.g. EEXIST from mkdir) is success.
#define POSIX_CHECK_EXCEPT(call, tolerated, what) POSIX_CHECK_IMPL(call, #call, tolerated, what)

// `text` is the call as written (stringified before its macros, e.g. O_RDONLY, expand).
#define POSIX_CHECK_IMPL(call, text, tolerated, what)                                            \
  do {                                                                                           \
    if ((call) == -1 && errno != (tolerated)) {                                                  \
      const int posix_check_errno_ = errno;                                                      \
      return ::moerl::detail::posix_error(text, (what), __FILE__, __LINE__, posix_check_errno_); \
    }                                                                                            \
  } while (0)
