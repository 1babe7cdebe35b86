// The config loader and the scenario parser read boolean words alike (common/yaml_scalar.h):
// a word is a boolean in a config file, in `--set` and in a scenario, or in none of them.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>

#include "common/config.h"
#include "sims/scenario.h"
#include "tests/support/temp_dir.h"

namespace moerl::sims {
namespace {

// store.local_fsync read from a config file: its value, or nullopt when refused.
std::optional<bool> config_file_reads(const std::string& word) {
  moerl::testing::temp_dir dir("yaml-bool");
  const std::string path = dir.path() + "/moerl.yaml";
  std::ofstream(path) << "store:\n  local_fsync: " << word << "\n";
  auto cfg = config::load(path, {});
  if (!cfg) return std::nullopt;
  return cfg->get_bool("store.local_fsync");
}

std::optional<bool> config_override_reads(const std::string& word) {
  auto cfg = config::load("", {"store.local_fsync=" + word});
  if (!cfg) return std::nullopt;
  return cfg->get_bool("store.local_fsync");
}

// replacement.enabled read from a scenario: its value, or nullopt when refused.
std::optional<bool> scenario_reads(const std::string& word) {
  const std::string text = "name: tiny\nduration_s: 60\nreplacement:\n  enabled: " + word +
                           "\nfaults:\n  - kind: hard_kill\n    at_s: 5\n";
  auto s = parse_scenario(text, "tiny.yaml");
  if (!s) return std::nullopt;
  return s->replacement.enabled;
}

TEST(yaml_bool_agreement, config_and_scenario_read_every_word_alike) {
  const struct {
    const char* word;
    std::optional<bool> meaning;
  } cases[] = {{"true", true},        {"false", false},     {"True", true},
               {"False", false},      {"TRUE", true},       {"FALSE", false},
               {"yes", std::nullopt}, {"no", std::nullopt}, {"on", std::nullopt},
               {"off", std::nullopt}, {"1", std::nullopt},  {"0", std::nullopt}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.word);
    EXPECT_EQ(config_file_reads(c.word), c.meaning);
    EXPECT_EQ(config_override_reads(c.word), c.meaning);
    EXPECT_EQ(scenario_reads(c.word), c.meaning);
  }
}

}  // namespace
}  // namespace moerl::sims
