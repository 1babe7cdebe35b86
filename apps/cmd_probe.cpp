// `moerl probe`: a pod's liveness or readiness probe (deploy/ runs it as an exec probe), read
// from the health file its node agent rewrites (common/health_file.h). Exit 0 when it passes;
// 1 with the reason on stderr when it does not (the kubelet logs it in the pod's events).
#include <iostream>

#include <CLI/CLI.hpp>

#include "actors/interruption.h"
#include "apps/commands.h"
#include "common/health_file.h"

namespace moerl::apps {

void add_probe_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("probe",
                                  "a pod's liveness/readiness probe from its node's "
                                  "health file (node.health_file)");
  static std::string file;
  static bool ready = false;
  static int64_t within_ms = 10000;
  cmd->add_option("--file", file, "the node's health file (node.health_file)")->required();
  auto* live = cmd->add_flag("--live", "passes while the node's agent runs and is not fenced");
  cmd->add_flag("--ready", ready,
                "passes while the node runs, is not draining and the coordinator accepts it")
      ->excludes(live);
  cmd->add_option("--within-ms", within_ms,
                  "how old the agent's last write (and, for --ready, the coordinator's last "
                  "acceptance) may be")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
  cmd->callback([] {
    auto r = read_health(file);
    if (!r) {
      std::cerr << "moerl probe: " << r.err().message << "\n";
      throw CLI::RuntimeError(1);
    }
    const auto kind = ready ? probe_kind::ready : probe_kind::live;
    const std::string why = probe_failure(*r, kind, actors::unix_now_ms(), within_ms);
    if (!why.empty()) {
      std::cerr << "moerl probe: " << (ready ? "not ready: " : "not live: ") << why << "\n";
      throw CLI::RuntimeError(1);
    }
    std::cout << r->node << " " << (ready ? "ready" : "live") << "\n";
  });
}

}  // namespace moerl::apps
