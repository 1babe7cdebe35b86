#include <iostream>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "provenance/provenance.h"

namespace moerl::apps {

void add_version_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("version", "print version and build/node provenance");
  static bool as_json = false;
  cmd->add_flag("--json", as_json, "print the full provenance as JSON");
  cmd->callback([] {
    const auto prov = collect_provenance();
    if (as_json) {
      std::cout << prov.dump(2) << "\n";
      return;
    }
    std::cout << "moerl " << prov["version"].get<std::string>() << " (commit "
              << prov["commit"].get<std::string>() << ", " << prov["compiler"].get<std::string>()
              << ", " << prov["build_type"].get<std::string>() << ")\n";
    std::cout << "  caf " << prov["caf"].get<std::string>() << ", libfabric "
              << prov["libfabric"]["version"].get<std::string>() << ", zeromq "
              << prov["zeromq"].get<std::string>() << ", capnp " << prov["capnp"].get<std::string>()
              << "\n  cuda " << prov["cuda"].dump() << ", nccl " << prov["nccl"].dump() << ", gpu "
              << prov["gpu"].dump() << "\n  fabric providers:";
    for (const auto& p : prov["libfabric"]["providers"])
      std::cout << " " << p["name"].get<std::string>();
    std::cout << "\n";
  });
}

}  // namespace moerl::apps
