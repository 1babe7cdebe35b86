// MOERL_CURL_CHECK: the one check for libcurl calls in store/. A call that does not return
// CURLE_OK makes the enclosing function return errc::io_error naming the call, curl's
// description (and its detailed error buffer when one is given), the file and the line.
#pragma once

#ifndef MOERL_INSIDE_moerl_store
#error "store/internal/curl_check.h is private to moerl_store (store/): include its public headers"
#endif

#include <string>

#include <curl/curl.h>

#include "common/error.h"

namespace moerl::store::detail {

error curl_error(const char* call, CURLcode code, const char* detail, const char* file, int line);

}  // namespace moerl::store::detail

// `errtext` is curl's CURLOPT_ERRORBUFFER (or nullptr / "" when there is none).
#define MOERL_CURL_CHECK(call, errtext)                                                     \
  do {                                                                                      \
    const CURLcode moerl_curl_rc_ = (call);                                                 \
    if (moerl_curl_rc_ != CURLE_OK) {                                                       \
      return ::moerl::store::detail::curl_error(#call, moerl_curl_rc_, (errtext), __FILE__, \
                                                __LINE__);                                  \
    }                                                                                       \
  } while (0)
