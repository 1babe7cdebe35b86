// Whether an address a node listens on is reachable only from this machine. Loopback-only
// runs may stay plain (console tokens at their defaults, ZeroMQ planes without CURVE); any
// other address, 0.0.0.0 included, must carry credentials.
#pragma once

#include <string>

namespace moerl {

inline bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

}  // namespace moerl
