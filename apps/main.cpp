// moerl: one binary, subcommands in the manner of `ray` and `kubectl`.
#include <CLI/CLI.hpp>

#include "apps/cmd_ca.h"
#include "apps/commands.h"
#include "common/allocator_tuning.h"

int main(int argc, char** argv) {
  // Before anything allocates. A refusal (a sanitizer's allocator) leaves glibc's defaults:
  // slower steps, nothing else.
  (void)moerl::keep_freed_heap_for_reuse();
  CLI::App app{"moerl: RL post-training runtime for Mixture-of-Experts models"};
  app.require_subcommand(1);
  moerl::apps::add_version_command(app);
  moerl::apps::add_config_command(app);
  moerl::apps::add_bench_command(app);
  moerl::apps::add_store_command(app);
  moerl::apps::add_node_command(app);
  moerl::apps::add_up_command(app);
  moerl::apps::add_console_command(app);
  moerl::apps::add_learn_command(app);
  moerl::apps::add_sim_command(app);
  moerl::apps::add_probe_command(app);
  moerl::apps::add_secret_command(app);
  moerl::apps::add_ca_command(app);
  moerl::apps::add_report_command(app);
  // Components register further subcommands here (node, up, console, sim).
  CLI11_PARSE(app, argc, argv);
  return 0;
}
