// Configuration: a YAML file plus command-line overrides (`--set key=value`), validated
// against one schema (common/config_schema.cpp) where every key is declared once with
// its type, default and meaning. Unknown keys and bad values are errors naming the file,
// the line and the key; callers exit with code 2 on them.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl {

enum class key_type { boolean, integer, number, string, string_list };

// The values an integer or number key may take, checked by config::set (so a config file, a
// `--set` and every node refuse the same values with the same error). A side left at its
// infinity is unbounded. Integer bounds are whole numbers below 2^53, which a double holds
// exactly.
struct key_range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;  // the minimum itself is refused: (min, ...
  bool max_exclusive = false;  // the maximum itself is refused: ..., max)

  static key_range closed(double lo, double hi) { return {lo, hi, false, false}; }    // [lo, hi]
  static key_range at_least(double lo) { return {lo, kInf, false, false}; }           // [lo, inf)
  static key_range above(double lo) { return {lo, kInf, true, false}; }               // (lo, inf)
  static key_range half_open(double lo, double hi) { return {lo, hi, false, true}; }  // [lo, hi)
  static key_range open(double lo, double hi) { return {lo, hi, true, true}; }        // (lo, hi)

  bool bounded() const { return min > -kInf || max < kInf; }
  bool contains(double v) const;
  // The rule in words for a key of type t: "in 1..4", ">= 1", "> 0", "in [0, 1)".
  std::string describe(key_type t) const;

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
};

struct key_spec {
  const char* key;  // dotted path, e.g. "fabric.provider"
  key_type type;
  const char* default_value;  // text form; lists are comma-separated
  const char* meaning;        // one line, shown in `moerl config keys` and docs/CONFIG.md
  const char* choices;        // "a|b|c" for enumerated strings, "" otherwise
  key_range range = {};       // integer and number keys; unbounded unless declared
};

// How a key_rule relates its key to the other key's value.
enum class key_relation {
  at_most,       // key <= other
  at_least,      // key >= other
  greater_than,  // key > other
  divides,       // other % key == 0
  within,        // key lies in `range` (a range that holds only under `when`)
};

// A constraint between keys that a component enforces on the combination (the coordinator
// on actors.groups_per_unit <= ledger.max_groups_per_unit, a buffer shard on one group
// fitting in buffer.capacity_samples, ...). Checked by config::load once the file and
// every override are in, so the order keys are given in does not matter.
struct key_rule {
  const char* key;  // the constrained integer key
  key_relation relation;
  const char* other;     // the integer key it is compared with; "" for key_relation::within
  const char* when;      // "key=value": the rule holds only then; "" always
  key_range range = {};  // key_relation::within only
};

// Every key moerl understands, in documentation order.
const std::vector<key_spec>& config_schema();
// Every rule between keys, in documentation order (config_schema.cpp, after the keys).
const std::vector<key_rule>& config_rules();
const key_spec* find_key(const std::string& key);
const char* key_type_name(key_type t);
// A rule in words: "<= ledger.max_groups_per_unit", "in 1..8 when task.name is add".
std::string describe_rule(const key_rule& r);

class config {
 public:
  // All keys at their defaults.
  static config defaults();
  // Defaults, then the YAML file (if path is non-empty), then each "key=value" override.
  static result<config> load(const std::string& path, const std::vector<std::string>& overrides);

  // Validates `text` against the key's type, choices and range and stores it. `origin` names
  // where the value came from ("file.yaml:12", "--set") for error messages.
  status set(const std::string& key, const std::string& text, const std::string& origin);
  // Checks every key_rule (config::load does so after the last override); the error names
  // where the offending value came from, the key and the rule.
  status check_rules() const;

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
  std::map<std::string, std::string> origins_;  // keys set since defaults(): where from
};

}  // namespace moerl
