// A partition is real: a process in the namespace reaches the host end over TCP, cannot
// once the link is cut, and can again once it is healed. Skipped (with the reason) where
// network namespaces are unavailable.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "sims/netns_link.h"
#include "sims/process_control.h"

namespace moerl::sims {
namespace {

// A listening TCP socket on `addr`, port chosen by the kernel.
struct listener {
  int fd = -1;
  int port = 0;
  explicit listener(const std::string& addr) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 16) != 0) {
      ::close(fd);
      fd = -1;
      return;
    }
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
  }
  ~listener() {
    if (fd >= 0) ::close(fd);
  }
};

// Connects from inside the namespace with bash's /dev/tcp, bounded by `timeout`.
status connect_from_ns(const netns_link& l, const std::string& addr, int port) {
  std::vector<std::string> argv = l.exec_prefix();
  for (const char* a : {"timeout", "2", "bash", "-c"}) argv.push_back(a);
  argv.push_back("exec 3<>/dev/tcp/" + addr + "/" + std::to_string(port));
  return run_tool(argv, 5000);
}

TEST(netns_link, cut_link_stops_traffic_and_heal_restores_it) {
  const std::string why = netns_link::unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "partition unavailable: " << why;

  auto l = netns_link::create(7);
  ASSERT_TRUE(l.ok()) << l.err().to_string();
  listener host((*l)->host_address());
  ASSERT_GE(host.fd, 0);

  {
    auto first = connect_from_ns(**l, (*l)->host_address(), host.port);
    EXPECT_TRUE(first.ok()) << first.err().to_string();
  }
  ASSERT_TRUE((*l)->cut().ok());
  EXPECT_TRUE((*l)->is_cut());
  auto cut = connect_from_ns(**l, (*l)->host_address(), host.port);
  EXPECT_FALSE(cut.ok());
  // Heal after the third and last ARP probe of that connect (sent 2 s after it began, into
  // the cut) but before the probing gives up (3 s): with ARP on the link, the SYN of the
  // next connect waited on that INCOMPLETE entry and failed with "No route to host" when it
  // turned FAILED. The link's neighbour entries are permanent, so nothing waits on ARP.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  {
    auto healed = (*l)->heal();
    ASSERT_TRUE(healed.ok()) << healed.err().to_string();
  }
  {
    auto healed = connect_from_ns(**l, (*l)->host_address(), host.port);
    EXPECT_TRUE(healed.ok()) << healed.err().to_string();
  }
}

TEST(netns_link, node_inside_reaches_the_hosts_loopback_cluster_until_cut) {
  const std::string why = netns_link::unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "partition unavailable: " << why;
  auto l = netns_link::create(9);
  ASSERT_TRUE(l.ok()) << l.err().to_string();
  // A local cluster listens on 127.0.0.1: the namespaced node must reach exactly that.
  listener local("127.0.0.1");
  ASSERT_GE(local.fd, 0);
  {
    auto first = connect_from_ns(**l, "127.0.0.1", local.port);
    EXPECT_TRUE(first.ok()) << first.err().to_string();
  }
  ASSERT_TRUE((*l)->cut().ok());
  EXPECT_FALSE(connect_from_ns(**l, "127.0.0.1", local.port).ok());
  ASSERT_TRUE((*l)->heal().ok());
  {
    auto healed = connect_from_ns(**l, "127.0.0.1", local.port);
    EXPECT_TRUE(healed.ok()) << healed.err().to_string();
  }
}

TEST(netns_link, destroying_the_link_removes_the_namespace) {
  const std::string why = netns_link::unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "partition unavailable: " << why;
  std::string name;
  {
    auto l = netns_link::create(8);
    ASSERT_TRUE(l.ok()) << l.err().to_string();
    name = (*l)->name();
    EXPECT_TRUE(run_tool({"ip", "netns", "exec", name, "true"}).ok());
  }
  EXPECT_FALSE(run_tool({"ip", "netns", "exec", name, "true"}).ok());
}

TEST(netns_link, index_out_of_range_is_refused) {
  auto l = netns_link::create(256);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.err().code, errc::invalid_argument);
}

}  // namespace
}  // namespace moerl::sims
