// Several "hosts" on one switch: each host a network namespace with one veth (eth0) into a
// bridge that lives in a namespace of its own, all on 10.77.0.0/24 (host h at 10.77.0.<h+2>).
// Nothing on the real host changes (no interface, route or sysctl in its namespace) and, the
// namespaces being private, no address can clash with another run's. Hosts reach each other
// over tcp only; a process that must talk to the one that started it uses a filesystem
// socket (ZeroMQ ipc://), which namespaces do not separate.
// With link_mbit > 0 each host's egress is shaped to that rate (tc tbf): a host's NIC, so
// that one sender's uplink, not the CPU, bounds what it can send. Used by the weight plane's
// fan-out test and `moerl bench weights`' netns paths. Needs root (CAP_NET_ADMIN) and
// iproute2; destroying it deletes every namespace (their veths go with them). Not
// thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::sims {

class netns_switch {
 public:
  static result<std::unique_ptr<netns_switch>> create(int num_hosts, int link_mbit = 0);
  ~netns_switch();
  netns_switch(const netns_switch&) = delete;
  netns_switch& operator=(const netns_switch&) = delete;

  static std::string address(int host);                  // "10.77.0.<host+2>"
  std::vector<std::string> exec_prefix(int host) const;  // {"ip", "netns", "exec", name}
  int num_hosts() const { return static_cast<int>(names_.size()); }

 private:
  netns_switch() = default;
  std::string switch_ns_;
  std::vector<std::string> names_;
};

}  // namespace moerl::sims
