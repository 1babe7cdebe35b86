// A TCP port free on a host now: bound to port 0, read, closed. Whoever uses it binds it a
// moment later, so another process may take it in between; callers either retry or fail
// with the port named (moerl up's node ports, a Python trainer group's rendezvous).
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace moerl {

// `host`: a name or address getaddrinfo resolves (the first address that binds wins).
result<uint16_t> free_tcp_port(const std::string& host);

}  // namespace moerl
