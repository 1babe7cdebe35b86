// The HTTP console's bounds on the connections it holds (console.http_max_connections_per_peer
// and console.http_max_connections; console/internal/gated_http_server.h): connections held
// open from one address up to its bound, each one more closed as it is accepted and counted
// (too_many_from_peer), a request from another address answered meanwhile, then the total
// bound (too_many_connections), and slots given back when connections end. A real console on
// loopback, raw TCP clients from several 127.0.0.x addresses; the coordinator is not needed
// (whoami is answered from the token alone).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "console/http_console.h"
#include "tests/support/tcp_from.h"

namespace moerl::console {
namespace {

constexpr int64_t kPerPeer = 3;
constexpr int64_t kTotal = 5;
constexpr int kWaitMs = 20000;  // liveness bound of every wait below (each ends at once if right)
const char* const kViewer = "viewer-token-for-the-test";

using ::moerl::testing::connect_from;

// Everything the server sends on `fd` until it ends the connection; `ended` says whether it
// did within kWaitMs.
std::string read_to_end(int fd, bool& ended) {
  std::string got;
  ended = false;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kWaitMs) <= 0) return got;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      ended = true;
      return got;
    }
    got.append(buf, static_cast<size_t>(n));
  }
}

// GET /api/v1/whoami from `source` with the viewer's token: the whole response.
std::string whoami_from(const char* source, int port) {
  const int fd = connect_from(source, port);
  if (fd < 0) return "";
  const std::string req = std::string("GET /api/v1/whoami HTTP/1.1\r\nHost: test\r\n") +
                          "Authorization: Bearer " + kViewer + "\r\nConnection: close\r\n\r\n";
  std::string got;
  bool ended = false;
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()))
    got = read_to_end(fd, ended);
  ::close(fd);
  return got;
}

// Sockets the test holds open, closed however the test ends: a failed assertion must not leave
// them open, or the console's stop() would wait for their workers (console.http_idle_timeout_s).
struct held_sockets {
  std::vector<int> fds;
  ~held_sockets() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

// Waits (a liveness bound) until `done` holds.
bool eventually(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int port_of(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

uint64_t refused(const http_console& c, const char* reason) {
  return c.refusals().value(reason, uint64_t{0});
}

TEST(http_console_connection_limit, excess_connections_are_closed_at_accept_and_counted) {
  http_console_options o;
  o.address = "127.0.0.1:0";
  o.admin_token = "admin-token-for-the-test";
  o.viewer_token = kViewer;
  o.operator_token = "operator-token-for-the-test";
  o.requests_per_s = 0;  // the connection bounds alone
  o.max_connections = kTotal;
  o.max_connections_per_peer = kPerPeer;
  o.request_timeout_ms = 1000;
  o.idle_timeout_s = 120;  // held connections stay held for as long as the test runs
  // No coordinator: whatever the console asks it fails (the sampler's polls); whoami needs none.
  admin_caller_factory no_coordinator = [] {
    return admin_caller([](const std::string&, uint64_t, int) { return std::string(); });
  };
  auto c = http_console::start(no_coordinator, o);
  ASSERT_TRUE(c) << c.err().to_string();
  const int port = port_of((*c)->address());

  // 127.0.0.1 holds its bound's worth of idle connections.
  held_sockets sockets;
  std::vector<int>& held = sockets.fds;
  for (int i = 0; i < kPerPeer; ++i) held.push_back(connect_from("127.0.0.1", port));
  ASSERT_TRUE(eventually([&] { return (*c)->open_connections() == kPerPeer; }));

  // Each one more from it is closed as it is accepted, before anything is read, and counted.
  for (int i = 0; i < 4; ++i) {
    const int fd = connect_from("127.0.0.1", port);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    bool ended = false;
    EXPECT_EQ(read_to_end(fd, ended), "");
    EXPECT_TRUE(ended) << "connection " << i << " over the per-peer bound was left open";
    ::close(fd);
  }
  EXPECT_EQ(refused(**c, "too_many_from_peer"), 4u);
  EXPECT_EQ(refused(**c, "too_many_connections"), 0u);

  // Another address is served meanwhile, and its connection's slot comes back.
  const std::string answer = whoami_from("127.0.0.2", port);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("\"viewer\""), std::string::npos) << answer;
  ASSERT_TRUE(eventually([&] { return (*c)->open_connections() == kPerPeer; }));

  // The total bound: two more addresses fill it; the next connection is closed and counted.
  for (const char* source : {"127.0.0.3", "127.0.0.4"}) held.push_back(connect_from(source, port));
  ASSERT_TRUE(eventually([&] { return (*c)->open_connections() == kTotal; }));
  const int over = connect_from("127.0.0.5", port);
  bool ended = false;
  EXPECT_EQ(read_to_end(over, ended), "");
  EXPECT_TRUE(ended) << "a connection over the total bound was left open";
  ::close(over);
  EXPECT_EQ(refused(**c, "too_many_connections"), 1u);

  // A held connection is served when it asks.
  const std::string req = std::string("GET /api/v1/whoami HTTP/1.1\r\nHost: test\r\n") +
                          "Authorization: Bearer " + kViewer + "\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(held[0], req.data(), req.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(req.size()));
  const std::string held_answer = read_to_end(held[0], ended);
  EXPECT_EQ(held_answer.rfind("HTTP/1.1 200", 0), 0u) << held_answer;

  // Connections that end give their slots back: 127.0.0.1 is served again.
  for (int& fd : held) ::close(std::exchange(fd, -1));
  ASSERT_TRUE(eventually([&] { return (*c)->open_connections() == 0; }));
  const std::string again = whoami_from("127.0.0.1", port);
  EXPECT_EQ(again.rfind("HTTP/1.1 200", 0), 0u) << again;
  EXPECT_EQ(refused(**c, "too_many_from_peer"), 4u);
  (*c)->stop();
}

TEST(http_console_connection_limit, bounds_below_one_are_refused_naming_the_keys) {
  http_console_options o;
  o.address = "127.0.0.1:0";
  o.viewer_token = kViewer;
  o.operator_token = "operator-token-for-the-test";
  o.max_connections_per_peer = 0;
  auto c = http_console::start([] { return admin_caller(); }, o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.err().code, errc::invalid_config);
  EXPECT_NE(c.err().message.find("console.http_max_connections_per_peer"), std::string::npos)
      << c.err().message;
}

}  // namespace
}  // namespace moerl::console
