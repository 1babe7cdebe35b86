// STATUS_TRY and ASSIGN_OR_RETURN: the one way to propagate a failure out of a function that
// returns status or result<T>.
//
//   STATUS_TRY(store.put(key, bytes));                  // a status (or a result's error)
//   ASSIGN_OR_RETURN(auto parts, split(text, ','));     // a result<T>'s value, or its error
//
// The error keeps its code; its message is prefixed with the failing step (the callee's name),
// file and line, so an error that crossed several layers still says where it started.
//
// ASSIGN_OR_RETURN(lhs, expr): evaluates expr (a result<T>) once; on error returns it
// (prefixed as above) from the enclosing function, otherwise moves the value into lhs, which
// is a declaration (`auto x`, `const auto& x`, `std::string s`) or an existing lvalue. It
// expands to several statements: use it where a statement may stand, never as the unbraced
// body of an if or a loop. Its temporary is named after the line, so several uses may share a
// scope (one per line).
#pragma once

#include <string>
#include <utility>

#include "common/error.h"

namespace moerl::detail {
// "kernels::route(x, y)" -> "kernels::route": the step's name without its arguments.
inline std::string status_try_step(const char* expr) {
  const std::string text(expr);
  return text.substr(0, text.find('('));
}

// `failed`'s code, its message prefixed with "<step> (<file>:<line>): ".
inline error status_try_error(const char* expr, const char* file, int line, const error& failed) {
  return error{failed.code, status_try_step(expr) + " (" + file + ":" + std::to_string(line) +
                                "): " + failed.message};
}
}  // namespace moerl::detail

#define STATUS_TRY(expr)                                                                         \
  do {                                                                                           \
    ::moerl::status status_try_st_ = (expr);                                                     \
    if (!status_try_st_.ok())                                                                    \
      return ::moerl::detail::status_try_error(#expr, __FILE__, __LINE__, status_try_st_.err()); \
  } while (0)

#define MOERL_STATUS_CONCAT_INNER_(a, b) a##b
#define MOERL_STATUS_CONCAT_(a, b) MOERL_STATUS_CONCAT_INNER_(a, b)

// Variadic so that an expression with a top-level comma (a template argument list) passes
// whole; the declaration on the left must not contain one (use auto).
#define ASSIGN_OR_RETURN(lhs, ...) \
  MOERL_ASSIGN_OR_RETURN_IMPL_(MOERL_STATUS_CONCAT_(assign_or_return_, __LINE__), lhs, __VA_ARGS__)

#define MOERL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, ...)                                        \
  auto tmp = (__VA_ARGS__);                                                                \
  if (!tmp.ok())                                                                           \
    return ::moerl::detail::status_try_error(#__VA_ARGS__, __FILE__, __LINE__, tmp.err()); \
  lhs = std::move(tmp).value()
