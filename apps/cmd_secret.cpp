// `moerl secret init FILE`: a new cluster plane secret (zmq/plane_keys.h) for
// node.plane_secret_file. Every node of one cluster mounts the same file (deploy/: a
// Kubernetes Secret); the file never leaves the cluster and is never logged.
#include <iostream>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "zmq/plane_keys.h"

namespace moerl::apps {

void add_secret_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("secret", "the cluster's plane secret (node.plane_secret_file)");
  cmd->require_subcommand(1);
  auto* init = cmd->add_subcommand("init", "write a new random secret to FILE (mode 0600)");
  static std::string file;
  init->add_option("FILE", file, "where to write it; an existing file is never overwritten")
      ->required();
  init->callback([] {
    if (auto st = zmq::write_new_plane_secret(file); !st) {
      std::cerr << "moerl secret init: " << st.err().message << "\n";
      throw CLI::RuntimeError(2);
    }
    auto keys = zmq::load_plane_keys(file);  // proves the file works before anyone mounts it
    if (!keys) {
      std::cerr << "moerl secret init: " << keys.err().message << "\n";
      throw CLI::RuntimeError(2);
    }
    std::cout << "wrote " << file << "; set node.plane_secret_file=" << file
              << " on every node of the cluster (server public key " << keys->server_public
              << ")\n";
  });
}

}  // namespace moerl::apps
