// `moerl ca init DIR`: the cluster's own CA and node certificate for the control plane's TLS
// (actors/cluster_ca.h). Every node off loopback must run TLS (actors/caf_setup.cpp refuses
// to start without the files); deploy/ takes them from the Secret moerl-tls.
#include <iostream>

#include <CLI/CLI.hpp>

#include "actors/cluster_ca.h"
#include "apps/cmd_ca.h"

namespace moerl::apps {

void add_ca_command(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("ca", "the cluster's CA for the control plane's TLS (node.tls_*)");
  cmd->require_subcommand(1);
  auto* init = cmd->add_subcommand(
      "init", "write a new CA (ca.crt, ca.key) and a node certificate (tls.crt, tls.key) to DIR");
  static std::string dir;
  static int days = 365;
  init->add_option("DIR", dir, "a new directory (an existing one is never written to)")->required();
  init->add_option("--days", days, "validity of both certificates (default 365)")
      ->check(CLI::Range(1, 3650));
  init->callback([] {
    if (auto st = actors::write_cluster_ca(dir, days); !st) {
      std::cerr << st.err().message << "\n";
      throw CLI::RuntimeError(2);
    }
    std::cout << "wrote " << dir << "/{ca.crt,tls.crt,tls.key,ca.key}; on every node set "
              << "node.tls_ca=" << dir << "/ca.crt node.tls_certificate=" << dir
              << "/tls.crt node.tls_key=" << dir
              << "/tls.key (Kubernetes: the Secret moerl-tls from ca.crt, tls.crt, tls.key; "
                 "keep ca.key off the cluster)\n";
  });
}

}  // namespace moerl::apps
