#include "sims/netns_link.h"

#include <unistd.h>

#include "sims/process_control.h"
#include "sims/try.h"

namespace moerl::sims {

std::string netns_link::unavailable_reason() {
  if (::geteuid() != 0) return "network namespaces need root (CAP_NET_ADMIN); running as uid " +
                               std::to_string(::geteuid());
  if (::access("/usr/sbin/ip", X_OK) != 0 && ::access("/sbin/ip", X_OK) != 0 &&
      ::access("/usr/bin/ip", X_OK) != 0) {
    return "the `ip` tool (iproute2) is not installed";
  }
  // The only sure test is trying: containers may forbid namespaces even to root.
  auto probe = create(255);
  if (!probe) return "cannot create a network namespace with a veth pair: " + probe.err().message;
  return "";
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
  const std::string net = "10.213." + std::to_string(index) + ".";
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
  return l;
}

netns_link::~netns_link() {
  if (!created_) return;
  // Deleting the namespace destroys its end of the pair, which destroys the host end too;
  // the explicit delete covers a namespace that still has processes keeping it alive.
  (void)run_tool({"ip", "link", "del", host_if_});
  (void)run_tool({"ip", "netns", "del", name_});
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
