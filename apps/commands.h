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
void add_bench_command(CLI::App& root);    // moerl bench <kernels|ep|control> ...
void add_learn_command(CLI::App& root);    // moerl learn [--config F] [--set k=v] [--report F]

}  // namespace moerl::apps
