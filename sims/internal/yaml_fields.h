// Private to sims/: typed, line-aware reading of one YAML mapping. Every accessor records the
// key as known; finish() then refuses any key nobody asked for, so a misspelt field ("dedline_s")
// is an error naming its line instead of a silently ignored default.
#pragma once

#ifndef MOERL_INSIDE_moerl_sims
#error "sims/internal/yaml_fields.h is private to moerl_sims (sims/): include its public headers"
#endif

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/status_try.h"

namespace moerl::sims::detail {

// "FILE:LINE: FIELD: what" with a 1-based line.
error field_error(const std::string& origin, const YAML::Mark& mark, const std::string& field,
                  const std::string& what);

class yaml_fields {
 public:
  // `path` prefixes field names in messages, e.g. "faults[2]".
  yaml_fields(const YAML::Node& node, std::string origin, std::string path);

  bool has(const std::string& key) const;
  YAML::Node child(const std::string& key);   // marks the key as known
  int line_of(const std::string& key) const;  // 1-based; the mapping's line if absent

  status get_string(const std::string& key, std::string& out, bool required = false);
  status get_bool(const std::string& key, bool& out);
  status get_int(const std::string& key, int64_t& out, int64_t min, int64_t max,
                 bool required = false);
  status get_number(const std::string& key, double& out, double min, double max,
                    bool required = false);
  status get_string_list(const std::string& key, std::vector<std::string>& out);

  // errc::invalid_config naming the first key that no accessor asked for.
  status finish() const;

  error make_error(const std::string& key, const std::string& what) const;
  std::string field(const std::string& key) const;  // "path.key" or "key"
  const std::string& origin() const { return origin_; }

 private:
  YAML::Node node_;
  std::string origin_;
  std::string path_;
  std::set<std::string> known_;
};

// A scalar node's text, or an error naming the field when it is a list or mapping.
status scalar_text(const YAML::Node& n, const std::string& origin, const std::string& field,
                   std::string& out);

}  // namespace moerl::sims::detail
