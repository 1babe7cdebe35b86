#include "common/socket_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

namespace moerl {

std::string peer_ip(const sockaddr_storage& sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(sa).sin_addr, buf, sizeof(buf));
  else if (sa.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(sa).sin6_addr, buf, sizeof(buf));
  return buf;
}

std::string socket_peer_ip(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "";
  return peer_ip(sa);
}

void close_with_reset(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

}  // namespace moerl
