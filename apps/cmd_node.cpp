#include <CLI/CLI.hpp>

#include "actors/node_runtime.h"
#include "apps/commands.h"
#include "job/grpo_job.h"

namespace moerl::apps {

void add_node_command(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("node", "start one node process (one pod) and join the coordinator");
  static actors::node_args args;
  cmd->add_option("--role", args.role, "coordinator|rollout|reward|env|buffer|trainer|weights")
      ->required();
  cmd->add_option("--join", args.join,
                  "HOST:PORT of the coordinator (the coordinator listens there)")
      ->required();
  cmd->add_option("--config", args.config_file, "YAML config file");
  cmd->add_option("--set", args.overrides, "override key=value (repeatable)")
      ->allow_extra_args(false);
  cmd->callback([] {
    args.make_job = job::make_job;  // job.kind picks GRPO (default) or the modpow test work
    int rc = actors::run_node(args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace moerl::apps
