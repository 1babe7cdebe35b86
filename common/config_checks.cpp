// What config::set and config::load check beyond a value's type: the ranges declared with each
// key and the rules between keys (both in config_schema.cpp), and their words in errors and in
// `moerl config keys`.
#include <cmath>
#include <sstream>

#include "common/config.h"
#include "common/yaml_scalar.h"

namespace moerl {
namespace {

std::string format_bound(double v, key_type t) {
  if (t == key_type::integer) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream out;
  out << v;
  return out.str();
}

// "key=value" of a key_rule's `when`, split; an empty key when the rule always holds.
std::pair<std::string, std::string> split_when(const char* when) {
  const std::string w = when;
  const auto eq = w.find('=');
  if (eq == std::string::npos) return {"", ""};
  return {w.substr(0, eq), w.substr(eq + 1)};
}

// The rule's requirement in words; `other_value` (the other key's current value) is shown in
// parentheses when given: "<= ledger.max_groups_per_unit (4)".
std::string requirement(const key_rule& r, const std::string& other_value) {
  const std::string other =
      std::string(r.other) + (other_value.empty() ? "" : " (" + other_value + ")");
  std::string text;
  switch (r.relation) {
    case key_relation::at_most: text = "<= " + other; break;
    case key_relation::at_least: text = ">= " + other; break;
    case key_relation::greater_than: text = "> " + other; break;
    case key_relation::divides: text = "a divisor of " + other; break;
    case key_relation::within: text = r.range.describe(key_type::integer); break;
  }
  const auto [when_key, when_value] = split_when(r.when);
  if (!when_key.empty()) text += " when " + when_key + " is " + when_value;
  return text;
}

bool holds(const key_rule& r, int64_t v, int64_t other) {
  switch (r.relation) {
    case key_relation::at_most: return v <= other;
    case key_relation::at_least: return v >= other;
    case key_relation::greater_than: return v > other;
    case key_relation::divides: return v != 0 && other % v == 0;
    case key_relation::within: return r.range.contains(static_cast<double>(v));
  }
  return false;
}

}  // namespace

bool key_range::contains(double v) const {
  if (std::isnan(v)) return false;
  if (min_exclusive ? !(v > min) : !(v >= min)) return false;
  if (max_exclusive ? !(v < max) : !(v <= max)) return false;
  return true;
}

std::string key_range::describe(key_type t) const {
  const bool has_min = min > -kInf, has_max = max < kInf;
  const std::string lo = format_bound(min, t), hi = format_bound(max, t);
  if (has_min && has_max) {
    if (t == key_type::integer && !min_exclusive && !max_exclusive) return "in " + lo + ".." + hi;
    return std::string("in ") + (min_exclusive ? "(" : "[") + lo + ", " + hi +
           (max_exclusive ? ")" : "]");
  }
  if (has_min) return (min_exclusive ? "> " : ">= ") + lo;
  if (has_max) return (max_exclusive ? "< " : "<= ") + hi;
  return "any value";
}

std::string describe_rule(const key_rule& r) { return requirement(r, ""); }

status config::check_rules() const {
  for (const auto& r : config_rules()) {
    const auto [when_key, when_value] = split_when(r.when);
    if (!when_key.empty() && values_.at(when_key) != when_value) continue;
    const int64_t v = parse_yaml_int(values_.at(r.key)).value_or(0);
    const bool has_other = r.relation != key_relation::within;
    const int64_t other = has_other ? parse_yaml_int(values_.at(r.other)).value_or(0) : 0;
    if (holds(r, v, other)) continue;
    // Name the line that made the combination: the key's own if it was set, else the other
    // key's (the key kept its default and the other moved under it).
    const auto own = origins_.find(r.key);
    const auto theirs = has_other ? origins_.find(r.other) : origins_.end();
    const std::string origin = own != origins_.end()      ? own->second
                               : theirs != origins_.end() ? theirs->second
                                                          : "defaults";
    std::string msg = origin + ": key '" + r.key + "': must be " +
                      requirement(r, has_other ? std::to_string(other) : "") + ", got " +
                      std::to_string(v);
    if (own == origins_.end()) msg += " (its default)";
    return error{errc::invalid_config, msg};
  }
  return ok_status();
}

}  // namespace moerl
