// Propagates a failed moerl::status out of the calling function (which returns a status
// or a result<T>), prefixing where it failed so a kernel or exchange error names the step.
#pragma once

#include <string>

#include "common/error.h"

#define POLICY_TRY(expr)                                                              \
  do {                                                                                \
    ::moerl::status policy_try_st_ = (expr);                                          \
    if (!policy_try_st_.ok())                                                         \
      return ::moerl::error{policy_try_st_.err().code,                                \
                            std::string(#expr).substr(0, std::string(#expr).find('(')) + \
                                " (" + __FILE__ + ":" + std::to_string(__LINE__) +     \
                                "): " + policy_try_st_.err().message};                \
  } while (0)
