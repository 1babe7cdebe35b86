// SIMS_TRY: propagates a failed moerl::status out of a function returning status or result<T>.
#pragma once

#include "common/error.h"

#define SIMS_TRY(expr)                                 \
  do {                                                 \
    ::moerl::status sims_try_st_ = (expr);             \
    if (!sims_try_st_.ok()) return sims_try_st_.err(); \
  } while (0)
