// The one reading of YAML scalar words, shared by the config loader (common/config.cpp, which
// also reads `--set key=value` with it) and the scenario parser (sims/yaml_fields.cpp), so a
// word means the same in a config file, on the command line and in a scenario.
//
// Booleans are those of the YAML 1.2 core schema: true/false, True/False, TRUE/FALSE. The
// YAML 1.1 words (yes/no, on/off, y/n) and 1/0 are not booleans: `replace: no` is refused
// with an error instead of silently meaning whatever one parser thought.
// Thread-safety: pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace moerl {

// True or false for a YAML 1.2 core-schema boolean word; nullopt for anything else.
std::optional<bool> parse_yaml_bool(const std::string& text);

// A base-10 signed integer filling the whole text and in range of int64_t; nullopt otherwise.
std::optional<int64_t> parse_yaml_int(const std::string& text);

// A finite number (strtod syntax) filling the whole text; nullopt for anything else,
// including overflow and underflow.
std::optional<double> parse_yaml_number(const std::string& text);

}  // namespace moerl
