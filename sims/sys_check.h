// SIMS_SYS_CHECK: the one check for POSIX calls in sims/ (signals, fork/exec, waitpid, files).
// A call that returns -1 makes the enclosing function return a moerl::error naming the call,
// what it acted on, errno's text, and the source file and line. ESRCH (no such process)
// becomes errc::not_found, so the runner can tell "the node is already gone" from a failure.
#pragma once

#include <cerrno>
#include <string>

#include "common/error.h"

namespace moerl::sims::detail {

error sys_error(const char* call, const std::string& what, const char* file, int line, int err);

}  // namespace moerl::sims::detail

// `call` may be an assignment (pid = ::fork()); its value is compared with -1.
#define SIMS_SYS_CHECK(call, what)                                                        \
  do {                                                                                    \
    if ((call) == -1) {                                                                   \
      const int sims_errno_ = errno;                                                      \
      return ::moerl::sims::detail::sys_error(#call, (what), __FILE__, __LINE__, sims_errno_); \
    }                                                                                     \
  } while (0)
