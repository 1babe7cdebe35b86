// STATUS_TRY: the one way to propagate a failed moerl::status (or the error of a result<T>
// converted to status) out of a function that returns status or result<T>. The error keeps
// its code; its message is prefixed with the failing step (the callee's name), file and line,
// so an error that crossed several layers still says where it started.
#pragma once

#include <string>

#include "common/error.h"

namespace moerl::detail {
// "kernels::route(x, y)" -> "kernels::route": the step's name without its arguments.
inline std::string status_try_step(const char* expr) {
  const std::string text(expr);
  return text.substr(0, text.find('('));
}
}  // namespace moerl::detail

#define STATUS_TRY(expr)                                                                          \
  do {                                                                                            \
    ::moerl::status status_try_st_ = (expr);                                                      \
    if (!status_try_st_.ok())                                                                     \
      return ::moerl::error{status_try_st_.err().code,                                            \
                            ::moerl::detail::status_try_step(#expr) + " (" + __FILE__ + ":" +     \
                                std::to_string(__LINE__) + "): " + status_try_st_.err().message}; \
  } while (0)
