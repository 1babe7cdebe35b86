// `moerl ca init DIR` (cmd_ca.cpp). Its own header, not commands.h: a new subcommand costs
// one recompiled file.
#pragma once

namespace CLI {
class App;
}

namespace moerl::apps {

void add_ca_command(CLI::App& root);

}  // namespace moerl::apps
