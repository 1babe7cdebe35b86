#include <iostream>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "common/config.h"

namespace moerl::apps {
namespace {

// What a key accepts beyond its type, in words: its choices, or its range and every rule
// that constrains it ("in 1..4096; <= ledger.max_groups_per_unit"); "" when anything goes.
std::string allowed_values(const key_spec& k) {
  if (k.choices && *k.choices) return k.choices;
  std::string text = k.range.bounded() ? k.range.describe(k.type) : "";
  for (const auto& r : config_rules())
    if (std::string(r.key) == k.key) text += (text.empty() ? "" : "; ") + describe_rule(r);
  return text;
}

void print_keys_markdown() {
  std::cout << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& k : config_schema()) {
    // '|' inside a table cell must be escaped for Markdown.
    std::string allowed;
    for (char c : allowed_values(k)) allowed += (c == '|') ? std::string("\\|") : std::string(1, c);
    std::cout << "| `" << k.key << "` | " << key_type_name(k.type) << " | `" << k.default_value
              << "` | " << allowed << " | " << k.meaning << " |\n";
  }
}

void print_keys() {
  for (const auto& k : config_schema()) {
    const std::string allowed = allowed_values(k);
    std::cout << k.key << " = " << k.default_value << "    # " << k.meaning
              << (allowed.empty() ? "" : " (" + allowed + ")") << "\n";
  }
}

}  // namespace

void add_config_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("config", "inspect and validate configuration");
  cmd->require_subcommand(1);

  auto* keys = cmd->add_subcommand("keys", "list every configuration key with its default");
  static bool markdown = false;
  keys->add_flag("--markdown", markdown, "print as docs/CONFIG.md's Markdown table");
  keys->callback([] {
    if (markdown) return print_keys_markdown();
    print_keys();
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
