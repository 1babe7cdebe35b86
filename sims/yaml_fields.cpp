#include "sims/internal/yaml_fields.h"

#include <sstream>

#include "common/yaml_scalar.h"

namespace moerl::sims::detail {

error field_error(const std::string& origin, const YAML::Mark& mark, const std::string& field,
                  const std::string& what) {
  // yaml-cpp marks are 0-based; a null mark (line -1) comes from a synthesized node.
  const int line = mark.line >= 0 ? mark.line + 1 : 0;
  return error{errc::invalid_config,
               origin + ":" + std::to_string(line) + ": " + field + ": " + what};
}

status scalar_text(const YAML::Node& n, const std::string& origin, const std::string& field,
                   std::string& out) {
  if (!n.IsScalar()) {
    return field_error(
        origin, n.Mark(), field,
        n.IsNull() ? "has no value" : "expected a single value, not a list or mapping");
  }
  out = n.Scalar();
  return ok_status();
}

yaml_fields::yaml_fields(const YAML::Node& node, std::string origin, std::string path)
    : node_(node), origin_(std::move(origin)), path_(std::move(path)) {}

std::string yaml_fields::field(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

bool yaml_fields::has(const std::string& key) const { return node_[key].IsDefined(); }

YAML::Node yaml_fields::child(const std::string& key) {
  known_.insert(key);
  return node_[key];
}

int yaml_fields::line_of(const std::string& key) const {
  for (const auto& entry : node_) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) return entry.first.Mark().line + 1;
  }
  return node_.Mark().line + 1;
}

error yaml_fields::make_error(const std::string& key, const std::string& what) const {
  YAML::Mark mark = node_.Mark();
  for (const auto& entry : node_) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) mark = entry.second.Mark();
  }
  return field_error(origin_, mark, field(key), what);
}

status yaml_fields::get_string(const std::string& key, std::string& out, bool required) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) {
    if (required) return make_error(key, "is required");
    return ok_status();
  }
  return scalar_text(n, origin_, field(key), out);
}

status yaml_fields::get_bool(const std::string& key, bool& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return ok_status();
  std::string text;
  STATUS_TRY(scalar_text(n, origin_, field(key), text));
  const auto value = parse_yaml_bool(text);
  if (!value) return make_error(key, "expected true or false, got '" + text + "'");
  out = *value;
  return ok_status();
}

status yaml_fields::get_int(const std::string& key, int64_t& out, int64_t min, int64_t max,
                            bool required) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) {
    if (required) return make_error(key, "is required");
    return ok_status();
  }
  std::string text;
  STATUS_TRY(scalar_text(n, origin_, field(key), text));
  const auto parsed = parse_yaml_int(text);
  if (!parsed) return make_error(key, "expected an integer, got '" + text + "'");
  const int64_t v = *parsed;
  if (v < min || v > max) {
    return make_error(
        key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + text);
  }
  out = v;
  return ok_status();
}

namespace {
std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

status yaml_fields::get_number(const std::string& key, double& out, double min, double max,
                               bool required) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) {
    if (required) return make_error(key, "is required");
    return ok_status();
  }
  std::string text;
  STATUS_TRY(scalar_text(n, origin_, field(key), text));
  const auto parsed = parse_yaml_number(text);
  if (!parsed) return make_error(key, "expected a finite number, got '" + text + "'");
  const double v = *parsed;
  if (v < min || v > max) {
    return make_error(key, "must be in [" + fmt(min) + ", " + fmt(max) + "], got " + text);
  }
  out = v;
  return ok_status();
}

status yaml_fields::get_string_list(const std::string& key, std::vector<std::string>& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return ok_status();
  if (!n.IsSequence()) return make_error(key, "expected a list");
  out.clear();
  for (size_t i = 0; i < n.size(); ++i) {
    std::string text;
    STATUS_TRY(scalar_text(n[i], origin_, field(key) + "[" + std::to_string(i) + "]", text));
    out.push_back(text);
  }
  return ok_status();
}

status yaml_fields::finish() const {
  for (const auto& entry : node_) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "?";
    if (!known_.count(key)) {
      std::string allowed;
      for (const auto& k : known_) allowed += (allowed.empty() ? "" : ", ") + k;
      return field_error(origin_, entry.first.Mark(), field(key),
                         "unknown field (allowed here: " + allowed + ")");
    }
  }
  return ok_status();
}

}  // namespace moerl::sims::detail
