// Configuration: a YAML file plus command-line overrides (`--set key=value`), validated
// against one schema (common/config_schema.cpp) where every key is declared once with
// its type, default and meaning. Unknown keys and bad values are errors naming the file,
// the line and the key; callers exit with code 2 on them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl {

enum class key_type { boolean, integer, number, string, string_list };

struct key_spec {
  const char* key;  // dotted path, e.g. "fabric.provider"
  key_type type;
  const char* default_value;  // text form; lists are comma-separated
  const char* meaning;        // one line, shown in `moerl config keys` and the README
  const char* choices;        // "a|b|c" for enumerated strings, "" otherwise
};

// Every key moerl understands, in documentation order.
const std::vector<key_spec>& config_schema();
const key_spec* find_key(const std::string& key);
const char* key_type_name(key_type t);

class config {
 public:
  // All keys at their defaults.
  static config defaults();
  // Defaults, then the YAML file (if path is non-empty), then each "key=value" override.
  static result<config> load(const std::string& path, const std::vector<std::string>& overrides);

  // Validates `text` against the key's type and stores it. `origin` names where the value
  // came from ("file.yaml:12", "--set") for error messages.
  status set(const std::string& key, const std::string& text, const std::string& origin);

  // Getters assert the key is declared with that type (a mismatch is a bug, not input).
  bool get_bool(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::vector<std::string> get_list(const std::string& key) const;

  // Effective values as text, keyed by dotted path (for reports and provenance).
  const std::map<std::string, std::string>& values() const { return values_; }
  // Render the effective config as YAML (what a node would be started with).
  std::string to_yaml() const;

 private:
  const std::string& raw(const std::string& key, key_type expected) const;
  std::map<std::string, std::string> values_;
};

}  // namespace moerl
