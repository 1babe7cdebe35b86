#include "sims/netns_switch.h"

#include <unistd.h>

#include "common/status_try.h"
#include "sims/process_control.h"

namespace moerl::sims {

result<std::unique_ptr<netns_switch>> netns_switch::create(int num_hosts, int link_mbit) {
  if (num_hosts < 1 || num_hosts > 250)
    return error(errc::invalid_argument,
                 "netns_switch: " + std::to_string(num_hosts) + " hosts not in [1, 250]");
  std::unique_ptr<netns_switch> s(new netns_switch);
  // The pid keeps concurrent runs apart; a counter keeps two switches of one process apart.
  static int next = 0;
  const std::string tag =
      "mfo" + std::to_string(::getpid() % 100000) + "-" + std::to_string(next++);
  s->switch_ns_ = tag + "-sw";
  STATUS_TRY(run_tool({"ip", "netns", "add", s->switch_ns_}));
  STATUS_TRY(run_tool({"ip", "-n", s->switch_ns_, "link", "add", "br0", "type", "bridge"}));
  STATUS_TRY(run_tool({"ip", "-n", s->switch_ns_, "link", "set", "br0", "up"}));
  for (int h = 0; h < num_hosts; ++h) {
    const std::string ns = tag + "-h" + std::to_string(h), port = "p" + std::to_string(h);
    STATUS_TRY(run_tool({"ip", "netns", "add", ns}));
    s->names_.push_back(ns);
    STATUS_TRY(run_tool({"ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
                         port, "netns", s->switch_ns_}));
    STATUS_TRY(run_tool({"ip", "-n", s->switch_ns_, "link", "set", port, "master", "br0", "up"}));
    STATUS_TRY(run_tool({"ip", "-n", ns, "addr", "add", address(h) + "/24", "dev", "eth0"}));
    STATUS_TRY(run_tool({"ip", "-n", ns, "link", "set", "eth0", "up"}));
    STATUS_TRY(run_tool({"ip", "-n", ns, "link", "set", "lo", "up"}));
    if (link_mbit > 0)
      STATUS_TRY(run_tool({"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root",
                           "tbf", "rate", std::to_string(link_mbit) + "mbit", "burst", "256kb",
                           "latency", "100ms"}));
  }
  return s;
}

netns_switch::~netns_switch() {
  for (const auto& ns : names_) (void)run_tool({"ip", "netns", "del", ns});
  if (!switch_ns_.empty()) (void)run_tool({"ip", "netns", "del", switch_ns_});
}

std::string netns_switch::address(int host) { return "10.77.0." + std::to_string(host + 2); }

std::vector<std::string> netns_switch::exec_prefix(int host) const {
  return {"ip", "netns", "exec", names_.at(host)};
}

}  // namespace moerl::sims
