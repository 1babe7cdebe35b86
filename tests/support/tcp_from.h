// A raw TCP connection to a local listener from a chosen loopback address (127.0.0.1-255), so a
// test can be several peers at once: the listener bounds tests of the HTTP console and of the
// ZeroMQ planes (connections per peer address) use it.
#pragma once

#ifndef MOERL_TEST_CODE
#error \
    "tests/support/tcp_from.h is test code: production code (benches too) must not include tests/"
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace moerl::testing {

// A connected socket from `source` to 127.0.0.1:port, or -1 when it cannot be made (errno then
// says why: close(2) is not allowed to overwrite it).
inline int connect_from(const char* source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    const int why = errno;
    ::close(fd);
    errno = why;
    return -1;
  }
  return fd;
}

}  // namespace moerl::testing
