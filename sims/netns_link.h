// Network partition of one node: the node runs inside its own network namespace, joined to
// the host by a veth pair; cutting the link (host end down) cuts the node off from everyone,
// healing it (host end up) reconnects it, and the processes on both sides never notice
// anything but silence, as with a real partition. A process cannot be moved into a namespace
// after it started, so partitioned nodes are started inside one (exec_prefix()).
//
// Addressing: host end 10.213.<slot>.1/30, namespace end 10.213.<slot>.2/30, where the slot is
// the first of 0..254 not held (flock on /tmp/moerl-sim-netns-<slot>.lock) by another link on
// this machine and whose host address no interface holds (a namespace a dead run left behind
// keeps its host end), so concurrent runs never share a subnet. A local
// cluster lives on 127.0.0.1 (coordinator, shard and reward endpoints), so the namespace
// gives up its own loopback address and routes 127.0.0.0/8 over the veth to the host, with
// route_localnet on both veth ends (the kernel otherwise drops loopback addresses seen on a
// real interface as martians). A node started inside therefore uses the cluster's
// 127.0.0.1 addresses unchanged, and nothing else on the host changes: the host-side setting
// is on the veth only. The cost: the node cannot listen on 127.0.0.1 itself, which rollout,
// reward-less and trainer nodes do not need (they only connect out).
//
// ARP: both ends hold a permanent neighbour entry for the other (fixed MAC addresses per
// slot), so the link never resolves addresses. With ARP, a connect tried during a cut left
// the namespace's entry for the host end INCOMPLETE, then FAILED, and the first connects
// after heal() failed at once with EHOSTUNREACH ("No route to host") for up to 3 seconds.
// The entries live on the pair's own interfaces and go with them: nothing global changes
// (no ip_forward, rp_filter or other host-wide setting is needed: all traffic is local
// delivery between the two ends).
// create() and heal() return only once a TCP connect from inside the namespace to the host
// end and to the host's 127.0.0.1 succeeds (a probe), so a broken host shows as an error
// naming what failed instead of silence later.
//
// Needs root (CAP_NET_ADMIN) and the `ip` tool (iproute2). Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::sims {

class netns_link {
 public:
  // Empty when this process can create namespaces and veth pairs; else why not (the
  // scenario then reports its partition faults as skipped with this reason).
  static std::string unavailable_reason();

  // Creates namespace "moerl-sim-<pid>-<index>" and its veth pair, link up. index < 256
  // only names it; the subnet comes from a free slot.
  static result<std::unique_ptr<netns_link>> create(int index);
  ~netns_link();  // deletes the namespace (and with it the veth pair)
  netns_link(const netns_link&) = delete;
  netns_link& operator=(const netns_link&) = delete;

  std::vector<std::string> exec_prefix() const;  // {"ip", "netns", "exec", name}
  const std::string& name() const { return name_; }
  const std::string& host_address() const { return host_addr_; }
  const std::string& ns_address() const { return ns_addr_; }
  // The namespace's end of the pair (where a process inside binds what it listens on).
  const std::string& ns_interface() const { return ns_if_; }

  status cut();   // host end down: no packet crosses in either direction
  status heal();  // host end up again; returns once traffic crosses (probe)
  bool is_cut() const { return cut_; }

 private:
  netns_link() = default;
  status pin_neighbors();        // permanent ARP entries on both ends
  status probe_connect() const;  // TCP connects from inside to host end and 127.0.0.1
  std::string name_;
  std::string host_if_;
  std::string ns_if_;
  std::string host_mac_;
  std::string ns_mac_;
  std::string host_addr_;
  std::string ns_addr_;
  bool cut_ = false;
  bool created_ = false;
  int slot_lock_fd_ = -1;  // holds the subnet slot while open
};

}  // namespace moerl::sims
