#include "sims/netns_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/posix_check.h"
#include "common/status_try.h"
#include "sims/process_control.h"

namespace moerl::sims {

namespace {

// Writes a sysctl of this (the host's) namespace through /proc/sys.
status write_sysctl(const std::string& path, const std::string& value) {
  int fd;
  POSIX_CHECK(fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC), path);
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return ::moerl::detail::posix_error("write", path, __FILE__, __LINE__, n < 0 ? err : EIO);
  }
  return ok_status();
}

// One TCP connect from inside the namespace `ns_path` (/var/run/netns/<name>) to `to`, done by a
// forked child that enters the namespace, so this process never changes namespace. The
// child only makes system calls. 0 when it connected, else the errno that stopped it.
int connect_inside(const std::string& ns_path, const sockaddr_in& to, int timeout_ms) {
  const pid_t pid = ::fork();
  if (pid < 0) return errno;
  if (pid == 0) {
    const int nsfd = ::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0 || ::setns(nsfd, CLONE_NEWNET) != 0) ::_exit(errno & 0xff);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) ::_exit(errno & 0xff);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) ::_exit(0);
    if (errno != EINPROGRESS) ::_exit(errno & 0xff);
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, timeout_ms) != 1) ::_exit(ETIMEDOUT);
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) ::_exit(errno & 0xff);
    ::_exit(err & 0xff);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return errno;
  }
  if (!WIFEXITED(st)) return EINTR;
  return WEXITSTATUS(st);
}

// Whether an interface of this (the host's) namespace already holds IPv4 address `addr`: a
// namespace left behind by a run that died keeps its host end (and the address) although its
// slot's lock is free, and a second host end with the same address breaks both links.
bool address_in_use(const std::string& addr) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;  // cannot tell: the probe in create() will
  in_addr want{};
  ::inet_pton(AF_INET, addr.c_str(), &want);
  bool used = false;
  for (const ifaddrs* i = list; i && !used; i = i->ifa_next)
    used = i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
           reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want.s_addr;
  ::freeifaddrs(list);
  return used;
}

// MAC address of one end of the veth pair of `slot`: locally administered (02:...), fixed
// per slot so that the neighbour entries can be set without reading them back.
std::string veth_mac(int slot, int end) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "02:6d:6f:65:%02x:%02x", slot & 0xff, end & 0xff);
  return buf;
}

}  // namespace

std::string netns_link::unavailable_reason() {
  if (::geteuid() != 0)
    return "network namespaces need root (CAP_NET_ADMIN); running as uid " +
           std::to_string(::geteuid());
  if (::access("/usr/sbin/ip", X_OK) != 0 && ::access("/sbin/ip", X_OK) != 0 &&
      ::access("/usr/bin/ip", X_OK) != 0) {
    return "the `ip` tool (iproute2) is not installed";
  }
  // The only sure test is trying: containers may forbid namespaces even to root. Once per
  // process: the answer does not change while it runs.
  static const std::string reason = [] {
    auto probe = create(255);
    return probe ? std::string()
                 : "cannot create a network namespace with a veth pair: " + probe.err().message;
  }();
  return reason;
}

result<std::unique_ptr<netns_link>> netns_link::create(int index) {
  if (index < 0 || index > 255) {
    return error{errc::invalid_argument,
                 "netns index " + std::to_string(index) + " not in [0, 255]"};
  }
  std::unique_ptr<netns_link> l(new netns_link);
  const std::string tag = std::to_string(::getpid() % 100000) + "-" + std::to_string(index);
  l->name_ = "moerl-sim-" + tag;
  // Interface names are limited to 15 characters.
  l->host_if_ = "msh" + tag;
  l->ns_if_ = "msn" + tag;
  const std::string& ns_if = l->ns_if_;
  int slot = -1;
  for (int i = 0; i < 255 && slot < 0; ++i) {
    const std::string lock = "/tmp/moerl-sim-netns-" + std::to_string(i) + ".lock";
    int fd;
    POSIX_CHECK(fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644), lock);
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        !address_in_use("10.213." + std::to_string(i) + ".1")) {
      slot = i;
      l->slot_lock_fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  if (slot < 0) return error{errc::capacity_exceeded, "all 255 partition subnets are in use"};
  const std::string net = "10.213." + std::to_string(slot) + ".";
  l->host_addr_ = net + "1";
  l->ns_addr_ = net + "2";
  l->host_mac_ = veth_mac(slot, 1);
  l->ns_mac_ = veth_mac(slot, 2);

  STATUS_TRY(run_tool({"ip", "netns", "add", l->name_}));
  l->created_ = true;  // from here the destructor cleans up whatever follows
  STATUS_TRY(run_tool({"ip", "link", "add", l->host_if_, "address", l->host_mac_, "type", "veth",
                       "peer", "name", ns_if, "address", l->ns_mac_}));
  STATUS_TRY(run_tool({"ip", "link", "set", ns_if, "netns", l->name_}));
  STATUS_TRY(run_tool({"ip", "addr", "add", l->host_addr_ + "/30", "dev", l->host_if_}));
  STATUS_TRY(run_tool({"ip", "link", "set", l->host_if_, "up"}));
  STATUS_TRY(run_tool({"ip", "-n", l->name_, "addr", "add", l->ns_addr_ + "/30", "dev", ns_if}));
  STATUS_TRY(run_tool({"ip", "-n", l->name_, "link", "set", ns_if, "up"}));
  STATUS_TRY(run_tool({"ip", "-n", l->name_, "link", "set", "lo", "up"}));
  // 127.0.0.0/8 leads to the host (see the header): no local loopback address, a route via
  // the host end, and loopback addresses accepted on both veth ends.
  STATUS_TRY(run_tool({"ip", "-n", l->name_, "addr", "del", "127.0.0.1/8", "dev", "lo"}));
  STATUS_TRY(run_tool(
      {"ip", "-n", l->name_, "route", "add", "127.0.0.0/8", "via", l->host_addr_, "dev", ns_if}));
  STATUS_TRY(write_sysctl("/proc/sys/net/ipv4/conf/" + l->host_if_ + "/route_localnet", "1"));
  STATUS_TRY(run_tool({"ip", "netns", "exec", l->name_, "sysctl", "-q", "-w",
                       "net.ipv4.conf." + ns_if + ".route_localnet=1",
                       "net.ipv4.conf.all.route_localnet=1"}));
  // No ARP on the link (see the header): a connect tried while it is cut must not leave a
  // FAILED neighbour entry behind that refuses the first connects after heal().
  STATUS_TRY(l->pin_neighbors());
  // Return only a link that carries traffic (the host end's queue is activated
  // asynchronously after carrier-on), and say what is broken when it never does.
  STATUS_TRY(l->probe_connect());
  return l;
}

status netns_link::pin_neighbors() {
  STATUS_TRY(run_tool({"ip", "neigh", "replace", ns_addr_, "lladdr", ns_mac_, "dev", host_if_,
                       "nud", "permanent"}));
  STATUS_TRY(run_tool({"ip", "-n", name_, "neigh", "replace", host_addr_, "lladdr", host_mac_,
                       "dev", ns_if_, "nud", "permanent"}));
  return ok_status();
}

status netns_link::probe_connect() const {
  const std::string ns_path = "/var/run/netns/" + name_;  // where `ip netns add` puts it
  for (const std::string& addr : {host_addr_, std::string("127.0.0.1")}) {
    // A listener in this (the host's) namespace; the kernel completes the handshake from
    // its backlog, nothing needs to accept.
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
    int lfd;
    POSIX_CHECK(lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), "probe listener");
    socklen_t len = sizeof sa;
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(lfd, 4) != 0 ||
        ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
      const int err = errno;
      ::close(lfd);
      return ::moerl::detail::posix_error("bind/listen", "probe listener on " + addr, __FILE__,
                                          __LINE__, err);
    }
    // A few tries within ~5 s: the first SYN may meet a queue not yet activated.
    int err = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    do {
      err = connect_inside(ns_path, sa, 1000);
      if (err == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < end);
    ::close(lfd);
    if (err != 0) {
      return error{errc::io_error, "partition link " + name_ +
                                       ": a TCP connect from inside the "
                                       "namespace to " +
                                       addr + ":" + std::to_string(ntohs(sa.sin_port)) + " (via " +
                                       host_if_ + ") fails: " + std::strerror(err)};
    }
  }
  return ok_status();
}

netns_link::~netns_link() {
  if (created_) {
    // Deleting the namespace destroys its end of the pair, which destroys the host end too;
    // the explicit delete covers a namespace that still has processes keeping it alive.
    (void)run_tool({"ip", "link", "del", host_if_});
    (void)run_tool({"ip", "netns", "del", name_});
  }
  // Only now may another link take this subnet.
  if (slot_lock_fd_ >= 0) ::close(slot_lock_fd_);
}

std::vector<std::string> netns_link::exec_prefix() const { return {"ip", "netns", "exec", name_}; }

status netns_link::cut() {
  STATUS_TRY(run_tool({"ip", "link", "set", host_if_, "down"}));
  cut_ = true;
  return ok_status();
}

status netns_link::heal() {
  STATUS_TRY(run_tool({"ip", "link", "set", host_if_, "up"}));
  cut_ = false;
  // Taking the host end down flushed its neighbour entries, permanent ones too.
  STATUS_TRY(pin_neighbors());
  return probe_connect();
}

}  // namespace moerl::sims
