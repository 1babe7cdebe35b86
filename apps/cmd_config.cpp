#include <iostream>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "common/config.h"

namespace moerl::apps {
namespace {

void print_keys_markdown() {
  std::cout << "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& k : config_schema()) {
    std::string type = key_type_name(k.type);
    if (k.choices && *k.choices) type += " (" + std::string(k.choices) + ")";
    // '|' inside a table cell must be escaped for Markdown.
    std::string escaped;
    for (char c : type) escaped += (c == '|') ? std::string("\\|") : std::string(1, c);
    std::cout << "| `" << k.key << "` | " << escaped << " | `" << k.default_value << "` | "
              << k.meaning << " |\n";
  }
}

}  // namespace

void add_config_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("config", "inspect and validate configuration");
  cmd->require_subcommand(1);

  auto* keys = cmd->add_subcommand("keys", "list every configuration key with its default");
  static bool markdown = false;
  keys->add_flag("--markdown", markdown, "print as the README's Markdown table");
  keys->callback([] {
    if (markdown) return print_keys_markdown();
    for (const auto& k : config_schema())
      std::cout << k.key << " = " << k.default_value << "    # " << k.meaning << "\n";
  });

  auto* check =
      cmd->add_subcommand("check", "validate a config file; exit 2 naming file, line and key");
  static std::string file;
  static std::vector<std::string> overrides;
  check->add_option("file", file, "YAML config file")->required();
  check->add_option("--set", overrides, "override key=value (repeatable)");
  check->callback([] {
    auto cfg = config::load(file, overrides);
    if (!cfg) {
      std::cerr << "moerl: invalid configuration: " << cfg.err().message << "\n";
      throw CLI::RuntimeError(2);
    }
    std::cout << cfg->to_yaml() << "\n";
  });
}

}  // namespace moerl::apps
