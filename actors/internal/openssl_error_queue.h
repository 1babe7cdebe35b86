// The guard around caf_openssl 0.17.6's SSL calls that keeps one TLS link's failure from
// closing the others (openssl_error_queue.cpp says why and how).
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/openssl_error_queue.h is private to moerl_actors (actors/): include its public headers"
#endif

#include "common/error.h"

namespace moerl::actors {

// Ok when the process's SSL_read/SSL_write/SSL_connect/SSL_accept are the guarded ones; an
// error naming the problem otherwise. A TLS node calls it before its first link: it also
// keeps the guard's object file in every executable that links moerl_actors.
moerl::status check_openssl_error_queue_guard();

}  // namespace moerl::actors
