#include "common/config.h"

#include <cassert>
#include <fstream>
#include <optional>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "common/config_text.h"
#include "common/yaml_scalar.h"

namespace moerl {
namespace {

error config_error(const std::string& origin, const std::string& key, const std::string& what) {
  std::string msg = origin;
  if (!key.empty()) msg += ": key '" + printable_excerpt(key) + "'";
  msg += ": " + what;
  return {errc::invalid_config, msg};
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

std::string origin_of(const std::string& path, const YAML::Mark& mark) {
  return path + ":" + std::to_string(mark.line + 1);
}

status load_node(config& cfg, const YAML::Node& node, const std::string& prefix,
                 const std::string& path) {
  // Each entry is held by value: `it->first` / `it->second` would reach through the
  // temporary proxy yaml-cpp's iterator returns from operator->, which dies at the `;`.
  for (const auto& entry : node) {
    const YAML::Node key_node = entry.first;
    const YAML::Node value = entry.second;
    const std::string name = key_node.as<std::string>();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    const std::string origin = origin_of(path, key_node.Mark());
    const key_spec* spec = find_key(key);
    if (value.IsMap()) {
      if (spec) return config_error(origin, key, "expected a value, got a mapping");
      // A section: it must be the prefix of at least one declared key.
      bool known_section = false;
      for (const auto& k : config_schema())
        if (std::string(k.key).rfind(key + ".", 0) == 0) {
          known_section = true;
          break;
        }
      if (!known_section) return config_error(origin, key, "unknown section");
      if (auto st = load_node(cfg, value, key, path); !st) return st;
      continue;
    }
    if (!spec) return config_error(origin, key, "unknown key");
    std::string text;
    if (value.IsSequence()) {
      if (spec->type != key_type::string_list)
        return config_error(origin, key,
                            std::string("expected ") + key_type_name(spec->type) + ", got a list");
      for (size_t i = 0; i < value.size(); ++i) {
        if (!value[i].IsScalar()) return config_error(origin, key, "list items must be scalars");
        std::string item = value[i].as<std::string>();
        if (item.find(',') != std::string::npos)
          return config_error(origin, key, "list items must not contain ','");
        if (i) text += ",";
        text += item;
      }
    } else if (value.IsNull()) {
      return config_error(origin, key, "has no value");
    } else {
      text = value.as<std::string>();
    }
    if (auto st = cfg.set(key, text, origin); !st) return st;
  }
  return {};
}

}  // namespace

const char* key_type_name(key_type t) {
  switch (t) {
    case key_type::boolean: return "boolean";
    case key_type::integer: return "integer";
    case key_type::number: return "number";
    case key_type::string: return "string";
    case key_type::string_list: return "list";
  }
  return "?";
}

const key_spec* find_key(const std::string& key) {
  for (const auto& k : config_schema())
    if (key == k.key) return &k;
  return nullptr;
}

config config::defaults() {
  config cfg;
  for (const auto& k : config_schema()) cfg.values_[k.key] = k.default_value;
  return cfg;
}

status config::set(const std::string& key, const std::string& text, const std::string& origin) {
  const key_spec* spec = find_key(key);
  if (!spec) return config_error(origin, key, "unknown key");
  auto expected = [&] {
    return config_error(origin, key,
                        std::string("expected ") + key_type_name(spec->type) + ", got '" +
                            printable_excerpt(text) + "'");
  };
  std::optional<double> number;  // the value, for the range check
  switch (spec->type) {
    case key_type::boolean:
      if (!parse_yaml_bool(text)) return expected();
      break;
    case key_type::integer:
      if (auto v = parse_yaml_int(text)) {
        number = static_cast<double>(*v);
      } else {
        return expected();
      }
      break;
    case key_type::number:
      number = parse_yaml_number(text);
      if (!number) return expected();
      break;
    case key_type::string:
    case key_type::string_list: break;
  }
  if (number && !spec->range.contains(*number))
    return config_error(
        origin, key,
        "must be " + spec->range.describe(spec->type) + ", got " + printable_excerpt(text));
  if (spec->choices && *spec->choices) {
    const auto choices = split(spec->choices, '|');
    const auto items =
        spec->type == key_type::string_list ? split(text, ',') : std::vector<std::string>{text};
    for (const auto& item : items) {
      bool found = false;
      for (const auto& c : choices) found = found || c == item;
      if (!found)
        return config_error(origin, key,
                            "'" + printable_excerpt(item) + "' is not one of " + spec->choices);
    }
  }
  values_[key] = text;
  origins_[key] = origin;
  return {};
}

namespace {

// Secrets stay out of config files (a ConfigMap is not a Secret): a string key K whose
// companion K_file is set takes the first line of that file (a mounted Secret), and an
// unreadable or empty file is an error naming the key and the file.
status read_secret_files(config& cfg) {
  const std::string suffix = "_file";
  for (const auto& k : config_schema()) {
    const std::string key = k.key;
    if (key.size() <= suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string target = key.substr(0, key.size() - suffix.size());
    const key_spec* t = find_key(target);
    if (t == nullptr || t->type != key_type::string) continue;
    const std::string file = cfg.get_string(key);
    if (file.empty()) continue;
    std::ifstream in(file);
    std::string line;
    if (!in || !std::getline(in, line))
      return error{errc::invalid_config, key + ": cannot read " + file};
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    if (line.empty()) return error{errc::invalid_config, key + ": " + file + " is empty"};
    if (auto st = cfg.set(target, line, key + " (" + file + ")"); !st) return st.err();
  }
  return ok_status();
}

}  // namespace

result<config> config::load(const std::string& path, const std::vector<std::string>& overrides) {
  config cfg = defaults();
  if (!path.empty()) {
    // Read and vetted as text first: a binary or huge file is refused at once, naming the
    // offending byte, instead of being echoed back or parsed for seconds.
    auto text = read_config_text(path);
    if (!text) return text.err();
    YAML::Node root;
    try {
      root = YAML::Load(*text);
    } catch (const YAML::ParserException& e) {
      return error{errc::invalid_config,
                   path + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg};
    }
    if (!root.IsNull()) {
      if (!root.IsMap())
        return error{errc::invalid_config,
                     path + ":1: the top level must be a mapping of sections"};
      try {
        if (auto st = load_node(cfg, root, "", path); !st) return st.err();
      } catch (const YAML::Exception& e) {
        return error{errc::invalid_config,
                     path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg};
      }
    }
  }
  for (const auto& ov : overrides) {
    const auto eq = ov.find('=');
    if (eq == std::string::npos || eq == 0)
      return error{errc::invalid_config,
                   "--set '" + printable_excerpt(ov) + "': expected key=value"};
    if (auto st = cfg.set(ov.substr(0, eq), ov.substr(eq + 1), "--set"); !st) return st.err();
  }
  if (auto st = read_secret_files(cfg); !st) return st.err();
  if (auto st = cfg.check_rules(); !st) return st.err();
  return cfg;
}

const std::string& config::raw(const std::string& key, key_type expected) const {
  const key_spec* spec = find_key(key);
  assert(spec && "config key used in code is not declared in config_schema.cpp");
  assert(spec->type == expected && "config key read with the wrong type");
  (void)spec;
  (void)expected;
  return values_.at(key);
}

// set() admitted only values that parse, so these never fall back to the default.
bool config::get_bool(const std::string& key) const {
  return parse_yaml_bool(raw(key, key_type::boolean)).value_or(false);
}
int64_t config::get_int(const std::string& key) const {
  return parse_yaml_int(raw(key, key_type::integer)).value_or(0);
}
double config::get_double(const std::string& key) const {
  return parse_yaml_number(raw(key, key_type::number)).value_or(0.0);
}
std::string config::get_string(const std::string& key) const { return raw(key, key_type::string); }
std::vector<std::string> config::get_list(const std::string& key) const {
  return split(raw(key, key_type::string_list), ',');
}

std::string config::to_yaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  // Keys are sorted, so keys of one section are adjacent.
  std::string open_section;
  for (const auto& [key, value] : values_) {
    const auto dot = key.find('.');
    const std::string section = key.substr(0, dot);
    if (section != open_section) {
      if (!open_section.empty()) out << YAML::EndMap;
      out << YAML::Key << section << YAML::Value << YAML::BeginMap;
      open_section = section;
    }
    out << YAML::Key << key.substr(dot + 1);
    const key_spec* spec = find_key(key);
    if (spec && spec->type == key_type::string_list) {
      out << YAML::Value << YAML::Flow << split(value, ',');
    } else {
      out << YAML::Value << value;
    }
  }
  if (!open_section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return out.c_str();
}

}  // namespace moerl
