// MOERL_POSIX_CHECK: the one check for POSIX calls in store/. A call that returns -1 makes
// the enclosing function return a moerl::error naming the call, the object it acted on,
// errno's text, and the source file and line. ENOENT becomes errc::not_found so callers
// (and ENOTDIR) so callers can tell "absent" from "broken"; every other errno is
// errc::io_error.
#pragma once

#include <cerrno>
#include <string>

#include "common/error.h"

namespace moerl::store::detail {

error posix_error(const char* call, const std::string& what, const char* file, int line,
                  int err);

}  // namespace moerl::store::detail

// `call` may be an assignment (fd = ::open(...)); its value is compared with -1.
// ENOTDIR (a leading part of the path is a file) also means "absent": not_found.
#define MOERL_POSIX_CHECK(call, what) MOERL_POSIX_CHECK_IMPL(call, #call, 0, what)

// The same, but a failure with errno == `tolerated` (e.g. EEXIST from mkdir) is success.
#define MOERL_POSIX_CHECK_EXCEPT(call, tolerated, what) \
  MOERL_POSIX_CHECK_IMPL(call, #call, tolerated, what)

// `text` is the call as written (stringified before its macros, e.g. O_RDONLY, expand).
#define MOERL_POSIX_CHECK_IMPL(call, text, tolerated, what)                           \
  do {                                                                                \
    if ((call) == -1 && errno != (tolerated)) {                                       \
      const int moerl_errno_ = errno;                                                 \
      return ::moerl::store::detail::posix_error(text, (what), __FILE__, __LINE__,    \
                                                 moerl_errno_);                       \
    }                                                                                 \
  } while (0)
