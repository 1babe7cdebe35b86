#include "sims/yaml_fields.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

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
    return field_error(origin, n.Mark(), field,
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
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->first.Mark().line + 1;
  }
  return node_.Mark().line + 1;
}

error yaml_fields::make_error(const std::string& key, const std::string& what) const {
  YAML::Mark mark = node_.Mark();
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) mark = it->second.Mark();
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
  if (text == "true" || text == "yes" || text == "on") {
    out = true;
  } else if (text == "false" || text == "no" || text == "off") {
    out = false;
  } else {
    return make_error(key, "expected true or false, got '" + text + "'");
  }
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
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    return make_error(key, "expected an integer, got '" + text + "'");
  }
  if (v < min || v > max) {
    return make_error(key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                               "], got " + text);
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
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
    return make_error(key, "expected a finite number, got '" + text + "'");
  }
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
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
    if (!known_.count(key)) {
      std::string allowed;
      for (const auto& k : known_) allowed += (allowed.empty() ? "" : ", ") + k;
      return field_error(origin_, it->first.Mark(), field(key),
                         "unknown field (allowed here: " + allowed + ")");
    }
  }
  return ok_status();
}

}  // namespace moerl::sims::detail
