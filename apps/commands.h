// The `moerl` binary's subcommands, one file per subcommand (apps/cmd_<name>.cpp).
// Each add_* function registers its subcommand on the root app. A handler reports failure
// by throwing CLI::RuntimeError(exit_code); exit code 2 means bad input (config, flags).
#pragma once

namespace CLI {
class App;
}

namespace moerl::apps {

void add_version_command(CLI::App& root);  // moerl version [--json]
void add_config_command(CLI::App& root);   // moerl config keys|check
void add_bench_command(
    CLI::App& root);  // moerl bench <kernels|ep|control|ledger|store|policy|job-ep> ...
void add_store_command(CLI::App& root);  // moerl store ls|cat|put|rm|checkpoints
void add_node_command(CLI::App& root);   // moerl node --role R --join HOST:PORT [--config F]
void add_up_command(
    CLI::App& root);  // moerl up [--config F] [--iterations N] [--console A] [--report F]
void add_console_command(
    CLI::App& root);  // moerl console [--connect A] <status|nodes|inject|drain> [--json]
void add_learn_command(CLI::App& root);   // moerl learn [--config F] [--set k=v] [--report F]
void add_sim_command(CLI::App& root);     // moerl sim run|validate SCENARIO [--short] [--json] ...
void add_probe_command(CLI::App& root);   // moerl probe --file F [--live|--ready] [--within-ms N]
void add_secret_command(CLI::App& root);  // moerl secret init FILE
void add_report_command(CLI::App& root);  // moerl report RUN_DIR [RUN_DIR...] [--out FILE]

}  // namespace moerl::apps
