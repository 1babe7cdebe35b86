// The HTTP console goes on listening when httplib's listening loop ends without stop(): httplib
// 0.11 closes the listening socket on any accept() error but EMFILE and returns, which left the
// console deaf while its process lived on (http_console::listen_until_stopped). The fault is
// made from outside, as the kernel would: the listening socket is shut down for reading, so
// accept() fails (EINVAL) and the loop ends. A connection admitted before it stays served.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "console/http_console.h"
#include "tests/support/tcp_from.h"

namespace moerl::console {
namespace {

const char* const kViewer = "viewer-token-for-the-test";
const std::string kWhoami = std::string("GET /api/v1/whoami HTTP/1.1\r\nHost: test\r\n") +
                            "Authorization: Bearer " + kViewer + "\r\n\r\n";

// The first response on `fd` (headers and the short JSON body), or "" when none comes in 10 s.
std::string ask_whoami(int fd) {
  if (::send(fd, kWhoami.data(), kWhoami.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(kWhoami.size()))
    return "";
  std::string got;
  while (got.find("}") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) return got;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// This process's listening TCP socket on `port` (the console's), or -1.
int listening_socket_on(int port) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(entry.path().filename().string());
    int listening = 0;
    socklen_t len = sizeof listening;
    sockaddr_in addr{};
    socklen_t addr_len = sizeof addr;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) continue;
    if (addr.sin_family == AF_INET && ntohs(addr.sin_port) == port) return fd;
  }
  return -1;
}

TEST(http_console_listener, listens_again_after_its_accept_loop_fails) {
  http_console_options o;
  o.address = "127.0.0.1:0";
  o.admin_token = "admin-token-for-the-test";
  o.viewer_token = kViewer;
  o.operator_token = "operator-token-for-the-test";
  o.requests_per_s = 0;
  admin_caller_factory no_coordinator = [] {
    return admin_caller([](const std::string&, uint64_t, int) { return std::string(); });
  };
  auto c = http_console::start(no_coordinator, o);
  ASSERT_TRUE(c) << c.err().to_string();
  const std::string address = (*c)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));

  const int held = ::moerl::testing::connect_from("127.0.0.1", port);
  ASSERT_GE(held, 0) << std::strerror(errno);
  EXPECT_EQ(ask_whoami(held).rfind("HTTP/1.1 200", 0), 0u);

  const int listener = listening_socket_on(port);
  ASSERT_GE(listener, 0) << "no listening socket on port " << port;
  ASSERT_EQ(::shutdown(listener, SHUT_RD), 0) << std::strerror(errno);

  // A new connection is served once the console has bound the address again (it waits 100 ms
  // first); before that, connect() is refused.
  std::string fresh;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (fresh.rfind("HTTP/1.1 200", 0) != 0 && std::chrono::steady_clock::now() < until) {
    const int fd = ::moerl::testing::connect_from("127.0.0.2", port);
    if (fd >= 0) {
      fresh = ask_whoami(fd);
      ::close(fd);
    }
    if (fresh.rfind("HTTP/1.1 200", 0) != 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(fresh.rfind("HTTP/1.1 200", 0), 0u) << "the console did not listen again: " << fresh;
  EXPECT_NE(listening_socket_on(port), -1);

  // The connection admitted before the failure is still served by its worker.
  EXPECT_EQ(ask_whoami(held).rfind("HTTP/1.1 200", 0), 0u);
  ::close(held);
  (*c)->stop();
}

}  // namespace
}  // namespace moerl::console
