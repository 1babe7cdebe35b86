// Who is at the other end of an accepted TCP connection, and how a listener turns one away.
// Shared by every listener that bounds connections per peer address: the coordinator's TLS
// acceptor (actors/tls_acceptor.cpp), the HTTP console (console/http_console.cpp) and the
// ZeroMQ planes' connection limit (zmq/connection_limit.cpp).
#pragma once

#include <sys/socket.h>

#include <string>

namespace moerl {

// The IP address (no port) in `sa`, as inet_ntop writes it; "" for another family.
std::string peer_ip(const sockaddr_storage& sa);

// The IP address of the peer of the connected socket `fd` (getpeername); "" when it is not an
// IP socket or is no longer connected.
std::string socket_peer_ip(int fd);

// Closes `fd` with a reset (SO_LINGER 0): a refused peer leaves no TIME_WAIT here and learns at
// once that it was refused.
void close_with_reset(int fd);

}  // namespace moerl
