#include "sims/netns_link.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "sims/process_control.h"
#include "sims/sys_check.h"
#include "sims/try.h"

namespace moerl::sims {

namespace {

// Writes a sysctl of this (the host's) namespace through /proc/sys.
status write_sysctl(const std::string& path, const std::string& value) {
  int fd;
  SIMS_SYS_CHECK(fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC), path);
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return detail::sys_error("write", path, __FILE__, __LINE__, n < 0 ? err : EIO);
  }
  return ok_status();
}

}  // namespace

std::string netns_link::unavailable_reason() {
  if (::geteuid() != 0) return "network namespaces need root (CAP_NET_ADMIN); running as uid " +
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
    return error{errc::invalid_argument, "netns index " + std::to_string(index) + " not in [0, 255]"};
  }
  std::unique_ptr<netns_link> l(new netns_link);
  const std::string tag = std::to_string(::getpid() % 100000) + "-" + std::to_string(index);
  l->name_ = "moerl-sim-" + tag;
  // Interface names are limited to 15 characters.
  l->host_if_ = "msh" + tag;
  const std::string ns_if = "msn" + tag;
  int slot = -1;
  for (int i = 0; i < 255 && slot < 0; ++i) {
    const std::string lock = "/tmp/moerl-sim-netns-" + std::to_string(i) + ".lock";
    int fd;
    SIMS_SYS_CHECK(fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644), lock);
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
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

  SIMS_TRY(run_tool({"ip", "netns", "add", l->name_}));
  l->created_ = true;  // from here the destructor cleans up whatever follows
  SIMS_TRY(run_tool({"ip", "link", "add", l->host_if_, "type", "veth", "peer", "name", ns_if}));
  SIMS_TRY(run_tool({"ip", "link", "set", ns_if, "netns", l->name_}));
  SIMS_TRY(run_tool({"ip", "addr", "add", l->host_addr_ + "/30", "dev", l->host_if_}));
  SIMS_TRY(run_tool({"ip", "link", "set", l->host_if_, "up"}));
  SIMS_TRY(run_tool({"ip", "-n", l->name_, "addr", "add", l->ns_addr_ + "/30", "dev", ns_if}));
  SIMS_TRY(run_tool({"ip", "-n", l->name_, "link", "set", ns_if, "up"}));
  SIMS_TRY(run_tool({"ip", "-n", l->name_, "link", "set", "lo", "up"}));
  // 127.0.0.0/8 leads to the host (see the header): no local loopback address, a route via
  // the host end, and loopback addresses accepted on both veth ends.
  SIMS_TRY(run_tool({"ip", "-n", l->name_, "addr", "del", "127.0.0.1/8", "dev", "lo"}));
  SIMS_TRY(run_tool({"ip", "-n", l->name_, "route", "add", "127.0.0.0/8", "via", l->host_addr_,
                     "dev", ns_if}));
  SIMS_TRY(write_sysctl("/proc/sys/net/ipv4/conf/" + l->host_if_ + "/route_localnet", "1"));
  SIMS_TRY(run_tool({"ip", "netns", "exec", l->name_, "sysctl", "-q", "-w",
                     "net.ipv4.conf." + ns_if + ".route_localnet=1",
                     "net.ipv4.conf.all.route_localnet=1"}));
  return l;
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
  SIMS_TRY(run_tool({"ip", "link", "set", host_if_, "down"}));
  cut_ = true;
  return ok_status();
}

status netns_link::heal() {
  SIMS_TRY(run_tool({"ip", "link", "set", host_if_, "up"}));
  cut_ = false;
  return ok_status();
}

}  // namespace moerl::sims
