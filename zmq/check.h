// The one macro that checks every libzmq call. On failure it
// returns (from the enclosing function, which returns status or result<T>) an error that
// names the call, errno text, file and line. EAGAIN on a non-blocking call becomes
// errc::capacity_exceeded (try again later); everything else errc::io_error.
#pragma once

#include <zmq.h>

#include <string>

#include "common/error.h"

namespace moerl::zmq::detail {

inline error zmq_failure(const char* call, int err, const char* file, int line) {
  return error(err == EAGAIN ? errc::capacity_exceeded : errc::io_error,
               std::string(call) + " failed: " + zmq_strerror(err) + " (" + file + ":" +
                   std::to_string(line) + ")");
}

}  // namespace moerl::zmq::detail

#define ZMQ_CHECK(call)                                                                 \
  do {                                                                                  \
    if ((call) == -1)                                                                   \
      return ::moerl::zmq::detail::zmq_failure(#call, zmq_errno(), __FILE__, __LINE__); \
  } while (0)
