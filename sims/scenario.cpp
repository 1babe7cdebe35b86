// Scenario files -> moerl::sims::scenario, refusing anything SCENARIOS.md does not allow.
#include "sims/scenario.h"

#include <cmath>
#include <limits>
#include <set>

#include <yaml-cpp/yaml.h>

#include "common/config.h"
#include "sims/internal/yaml_fields.h"

namespace moerl::sims {

using detail::yaml_fields;

namespace {

struct kind_entry {
  fault_kind kind;
  const char* name;
  const char* role;
  bool removes;
};

constexpr kind_entry kKinds[] = {
    {fault_kind::spot_notice, "spot_notice", "rollout", true},
    {fault_kind::rebalance_then_notice, "rebalance_then_notice", "rollout", true},
    {fault_kind::hard_kill, "hard_kill", "rollout", true},
    {fault_kind::sigterm, "sigterm", "rollout", true},
    {fault_kind::partition, "partition", "rollout", false},
    {fault_kind::slow_node, "slow_node", "rollout", false},
    {fault_kind::reward_crash, "reward_crash", "reward", true},
    {fault_kind::shard_loss, "shard_loss", "buffer", true},
    {fault_kind::coordinator_restart, "coordinator_restart", "coordinator", false},
    {fault_kind::env_kill, "env_kill", "env", true},
    {fault_kind::env_slow, "env_slow", "env", false},
    {fault_kind::weights_loss, "weights_loss", "weights", true},
};

const std::set<std::string>& known_roles() {
  static const std::set<std::string> roles = {"coordinator", "rollout", "reward", "env",
                                              "buffer",      "trainer", "weights"};
  return roles;
}

constexpr double kMaxSeconds = 7 * 24 * 3600.0;  // a week: longer is surely a typo
constexpr int64_t kMaxNodes = 1024;

status read_cluster(yaml_fields& f, cluster_spec& c) {
  STATUS_TRY(f.get_int("rollout", c.rollout, 1, kMaxNodes));
  STATUS_TRY(f.get_int("reward", c.reward, 0, kMaxNodes));
  STATUS_TRY(f.get_int("buffer", c.buffer, 1, kMaxNodes));
  STATUS_TRY(f.get_int("trainer_ranks", c.trainer_ranks, 1, 64));
  STATUS_TRY(f.get_int("trainer_members", c.trainer_members, 1, 16));
  STATUS_TRY(f.get_int("env", c.env, 0, kMaxNodes));
  STATUS_TRY(f.get_int("weights", c.weights, 1, 64));
  STATUS_TRY(f.get_string_list("set", c.set));
  // Each override must be a key moerl knows, with a value of its type: checked here, so a
  // typo fails at validation instead of when the cluster starts.
  config probe = config::defaults();
  for (size_t i = 0; i < c.set.size(); ++i) {
    const auto eq = c.set[i].find('=');
    if (eq == std::string::npos || eq == 0) {
      return f.make_error("set",
                          "entry " + std::to_string(i) + " '" + c.set[i] + "' is not key=value");
    }
    if (auto st = probe.set(c.set[i].substr(0, eq), c.set[i].substr(eq + 1), "set"); !st) {
      return f.make_error("set", "entry " + std::to_string(i) + ": " + st.err().message);
    }
  }
  return f.finish();
}

status read_replacement(yaml_fields& f, replacement_spec& r) {
  STATUS_TRY(f.get_bool("enabled", r.enabled));
  STATUS_TRY(f.get_number("delay_s", r.delay_s, 0.0, kMaxSeconds));
  return f.finish();
}

status require_mapping(const YAML::Node& n, const std::string& origin, const std::string& field) {
  if (!n.IsMap()) {
    return detail::field_error(origin, n.Mark(), field, "expected a mapping of fields");
  }
  return ok_status();
}

status read_target(yaml_fields& f, fault_spec& fs, const std::string& kind_name) {
  target_spec& t = fs.target;
  STATUS_TRY(f.get_string("node", t.node));
  STATUS_TRY(f.get_string("role", t.role));
  STATUS_TRY(f.get_int("count", t.count, 1, kMaxNodes));
  STATUS_TRY(f.get_number("fraction", t.fraction, 0.0, 1.0));
  STATUS_TRY(f.get_number("rate_per_node_hour", t.rate_per_node_hour, 0.0, 1e6));
  if (f.has("fraction") && t.fraction <= 0.0) {
    return f.make_error("fraction", "must be greater than 0");
  }
  if (f.has("rate_per_node_hour") && t.rate_per_node_hour <= 0.0) {
    return f.make_error("rate_per_node_hour", "must be greater than 0");
  }
  YAML::Node window = f.child("window_s");
  if (window.IsDefined()) {
    if (!window.IsSequence() || window.size() != 2) {
      return f.make_error("window_s", "expected [start, end] in seconds");
    }
    double v[2];
    for (int i = 0; i < 2; ++i) {
      std::string text;
      STATUS_TRY(detail::scalar_text(window[i], f.origin(), f.field("window_s"), text));
      char* end = nullptr;
      v[i] = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !std::isfinite(v[i]) || v[i] < 0) {
        return f.make_error("window_s", "'" + text + "' is not a non-negative number of seconds");
      }
    }
    if (v[1] <= v[0]) return f.make_error("window_s", "end must be after start");
    if (!f.has("rate_per_node_hour")) {
      return f.make_error("window_s", "only applies with rate_per_node_hour");
    }
    t.window_start_s = v[0];
    t.window_end_s = v[1];
  }

  const int forms = (f.has("node") ? 1 : 0) + (f.has("count") ? 1 : 0) +
                    (f.has("fraction") ? 1 : 0) + (f.has("rate_per_node_hour") ? 1 : 0);
  if (forms > 1) {
    return f.make_error(f.has("node") ? "node" : "count",
                        "give only one of node, count, fraction, rate_per_node_hour");
  }
  if (f.has("node")) {
    if (t.node.empty()) return f.make_error("node", "must not be empty");
    if (f.has("role")) return f.make_error("role", "a named node already has a role; drop role");
  } else {
    if (t.role.empty()) t.role = default_role(*parse_fault_kind(kind_name));
    if (!known_roles().count(t.role)) {
      return f.make_error("role", "unknown role '" + t.role +
                                      "' (coordinator|rollout|reward|env|buffer|trainer|weights)");
    }
    if (forms == 0) t.count = 1;
  }
  const fault_kind k = *parse_fault_kind(kind_name);
  if (k == fault_kind::coordinator_restart && !t.role.empty() && t.role != "coordinator") {
    return f.make_error("role", "coordinator_restart only targets the coordinator");
  }
  if (k == fault_kind::coordinator_restart && f.has("rate_per_node_hour")) {
    return f.make_error("rate_per_node_hour", "coordinator_restart is not rate-driven");
  }
  return ok_status();
}

status read_fault(const YAML::Node& n, const std::string& origin, size_t index, fault_spec& fs) {
  const std::string path = "faults[" + std::to_string(index) + "]";
  STATUS_TRY(require_mapping(n, origin, path));
  yaml_fields f(n, origin, path);
  fs.line = n.Mark().line + 1;
  std::string kind;
  STATUS_TRY(f.get_string("kind", kind, /*required=*/true));
  const auto k = parse_fault_kind(kind);
  if (!k) {
    std::string names;
    for (const auto& e : kKinds) names += std::string(names.empty() ? "" : "|") + e.name;
    return f.make_error("kind", "unknown fault kind '" + kind + "' (" + names + ")");
  }
  fs.kind = *k;
  STATUS_TRY(read_target(f, fs, kind));
  STATUS_TRY(f.get_number("at_s", fs.at_s, 0.0, kMaxSeconds));
  STATUS_TRY(f.get_number("spread_s", fs.spread_s, 0.0, kMaxSeconds));
  if (f.has("at_s") && f.has("rate_per_node_hour")) {
    return f.make_error("at_s", "a rate-driven fault takes window_s, not at_s");
  }
  bool replace = false;
  (void)f.child("replace");  // known on every kind (listed in "allowed here")
  if (f.has("replace")) {
    STATUS_TRY(f.get_bool("replace", replace));
    fs.replace = replace;
  }

  // Kind parameters: only the kind's own are read, so another kind's parameter is refused by
  // finish() as an unknown field.
  switch (fs.kind) {
    case fault_kind::spot_notice:
      STATUS_TRY(f.get_number("deadline_s", fs.deadline_s, 1.0, kMaxSeconds));
      break;
    case fault_kind::rebalance_then_notice:
      STATUS_TRY(f.get_number("deadline_s", fs.deadline_s, 1.0, kMaxSeconds));
      STATUS_TRY(f.get_number("notice_after_s", fs.notice_after_s, 0.0, kMaxSeconds));
      break;
    case fault_kind::sigterm:
      STATUS_TRY(f.get_number("grace_s", fs.grace_s, 0.0, kMaxSeconds));
      break;
    case fault_kind::partition:
      STATUS_TRY(f.get_number("duration_s", fs.duration_s, 0.001, kMaxSeconds, true));
      break;
    case fault_kind::slow_node:
    case fault_kind::env_slow:
      STATUS_TRY(f.get_number("duration_s", fs.duration_s, 0.001, kMaxSeconds, true));
      STATUS_TRY(f.get_int("stop_ms", fs.stop_ms, 1, 3600 * 1000));
      STATUS_TRY(f.get_int("period_ms", fs.period_ms, 2, 3600 * 1000));
      if (fs.stop_ms >= fs.period_ms) {
        return f.make_error(
            "stop_ms", "must be shorter than period_ms (" + std::to_string(fs.period_ms) + ")");
      }
      break;
    case fault_kind::coordinator_restart:
      STATUS_TRY(f.get_number("down_s", fs.down_s, 0.0, kMaxSeconds));
      break;
    case fault_kind::hard_kill: {
      std::string phase = "any";
      STATUS_TRY(f.get_string("phase", phase));
      if (phase == "any") {
        fs.phase = kill_phase::any;
      } else if (phase == "generation") {
        fs.phase = kill_phase::generation;
      } else if (phase == "weights") {
        fs.phase = kill_phase::weights;
      } else {
        return f.make_error("phase", "unknown phase '" + phase + "' (any|generation|weights)");
      }
      break;
    }
    case fault_kind::reward_crash:
    case fault_kind::shard_loss:
    case fault_kind::env_kill: break;
    case fault_kind::weights_loss: break;
  }
  if (!removes_node(fs.kind) && fs.replace.value_or(false)) {
    return f.make_error("replace",
                        std::string(kind) + " leaves its node running; nothing to replace");
  }
  return f.finish();
}

result<scenario> parse_root(const YAML::Node& root, const std::string& origin) {
  if (!root.IsMap()) {
    return detail::field_error(origin, root.Mark(), "(top level)",
                               "expected a mapping with name, duration_s and faults");
  }
  scenario s;
  s.file = origin;
  yaml_fields f(root, origin, "");
  STATUS_TRY(f.get_string("name", s.name, true));
  if (s.name.empty()) return f.make_error("name", "must not be empty");
  STATUS_TRY(f.get_string("description", s.description));
  int64_t seed = 1;
  STATUS_TRY(f.get_int("seed", seed, 0, std::numeric_limits<int64_t>::max()));
  s.seed = static_cast<uint64_t>(seed);
  STATUS_TRY(f.get_number("duration_s", s.duration_s, 0.001, kMaxSeconds, true));
  STATUS_TRY(f.get_number("settle_s", s.settle_s, 0.0, kMaxSeconds));

  if (YAML::Node c = f.child("cluster"); c.IsDefined()) {
    STATUS_TRY(require_mapping(c, origin, "cluster"));
    yaml_fields cf(c, origin, "cluster");
    STATUS_TRY(read_cluster(cf, s.cluster));
  }
  if (YAML::Node r = f.child("replacement"); r.IsDefined()) {
    STATUS_TRY(require_mapping(r, origin, "replacement"));
    yaml_fields rf(r, origin, "replacement");
    STATUS_TRY(read_replacement(rf, s.replacement));
  }
  if (YAML::Node sh = f.child("short"); sh.IsDefined()) {
    STATUS_TRY(require_mapping(sh, origin, "short"));
    yaml_fields sf(sh, origin, "short");
    if (sf.has("duration_s")) {
      double d = 0;
      STATUS_TRY(sf.get_number("duration_s", d, 0.001, kMaxSeconds));
      s.short_run.duration_s = d;
    }
    if (sf.has("settle_s")) {
      double d = 0;
      STATUS_TRY(sf.get_number("settle_s", d, 0.0, kMaxSeconds));
      s.short_run.settle_s = d;
    }
    STATUS_TRY(sf.get_number("time_scale", s.short_run.time_scale, 1e-6, 1.0));
    if (sf.has("time_scale") && s.short_run.time_scale <= 0.0) {
      return sf.make_error("time_scale", "must be greater than 0");
    }
    if (YAML::Node c = sf.child("cluster"); c.IsDefined()) {
      STATUS_TRY(require_mapping(c, origin, "short.cluster"));
      yaml_fields cf(c, origin, "short.cluster");
      cluster_spec cs = s.cluster;  // unset fields keep the long form's
      STATUS_TRY(read_cluster(cf, cs));
      s.short_run.cluster = cs;
    }
    if (YAML::Node r = sf.child("replacement"); r.IsDefined()) {
      STATUS_TRY(require_mapping(r, origin, "short.replacement"));
      yaml_fields rf(r, origin, "short.replacement");
      replacement_spec rs = s.replacement;
      STATUS_TRY(read_replacement(rf, rs));
      s.short_run.replacement = rs;
    }
    STATUS_TRY(sf.finish());
  }

  YAML::Node faults = f.child("faults");
  if (!faults.IsDefined()) return f.make_error("faults", "is required (a list of faults)");
  if (!faults.IsSequence() || faults.size() == 0) {
    return f.make_error("faults", "expected a non-empty list of faults");
  }
  for (size_t i = 0; i < faults.size(); ++i) {
    fault_spec fs;
    STATUS_TRY(read_fault(faults[i], origin, i, fs));
    if (fs.at_s >= s.duration_s && fs.target.rate_per_node_hour == 0.0) {
      return detail::field_error(origin, faults[i]["at_s"].Mark(),
                                 "faults[" + std::to_string(i) + "].at_s",
                                 "is not before duration_s (" + std::to_string(s.duration_s) + ")");
    }
    if (fs.target.window_end_s > s.duration_s) {
      return detail::field_error(origin, faults[i]["window_s"].Mark(),
                                 "faults[" + std::to_string(i) + "].window_s",
                                 "ends after duration_s");
    }
    s.faults.push_back(fs);
  }
  STATUS_TRY(f.finish());
  if (s.short_run.duration_s) {
    // An explicit short duration must still hold every (scaled) fault time.
    const scenario sh = apply_short_form(s);
    for (size_t i = 0; i < sh.faults.size(); ++i) {
      const fault_spec& fs = sh.faults[i];
      if ((fs.target.rate_per_node_hour == 0.0 && fs.at_s >= sh.duration_s) ||
          fs.target.window_end_s > sh.duration_s) {
        return detail::field_error(
            origin, root["short"]["duration_s"].Mark(), "short.duration_s",
            "faults[" + std::to_string(i) + "] (line " + std::to_string(fs.line) +
                ") falls after the short run's end once scaled by short.time_scale");
      }
    }
  }
  return s;
}

}  // namespace

const char* fault_kind_name(fault_kind k) {
  for (const auto& e : kKinds) {
    if (e.kind == k) return e.name;
  }
  return "?";
}

std::optional<fault_kind> parse_fault_kind(const std::string& name) {
  for (const auto& e : kKinds) {
    if (name == e.name) return e.kind;
  }
  return std::nullopt;
}

const char* default_role(fault_kind k) {
  for (const auto& e : kKinds) {
    if (e.kind == k) return e.role;
  }
  return "rollout";
}

bool removes_node(fault_kind k) {
  for (const auto& e : kKinds) {
    if (e.kind == k) return e.removes;
  }
  return false;
}

bool is_duty_cycle(fault_kind k) { return k == fault_kind::slow_node || k == fault_kind::env_slow; }

const char* kill_phase_name(kill_phase p) {
  switch (p) {
    case kill_phase::any: return "any";
    case kill_phase::generation: return "generation";
    case kill_phase::weights: return "weights";
  }
  return "?";
}

result<scenario> parse_scenario(const std::string& text, const std::string& origin) {
  // yaml-cpp reports syntax errors by exception; this is the boundary where they become values.
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return detail::field_error(origin, e.mark, "(syntax)", e.msg);
  }
  try {
    return parse_root(root, origin);
  } catch (const YAML::Exception& e) {
    return detail::field_error(origin, e.mark, "(structure)", e.msg);
  }
}

result<scenario> load_scenario(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return error{errc::io_error, path + ": cannot open the scenario file"};
  } catch (const YAML::Exception& e) {
    return detail::field_error(path, e.mark, "(syntax)", e.msg);
  }
  try {
    return parse_root(root, path);
  } catch (const YAML::Exception& e) {
    return detail::field_error(path, e.mark, "(structure)", e.msg);
  }
}

scenario apply_short_form(const scenario& s) {
  scenario out = s;
  const double k = s.short_run.time_scale;
  if (s.short_run.cluster) out.cluster = *s.short_run.cluster;
  if (s.short_run.replacement)
    out.replacement = *s.short_run.replacement;
  else
    out.replacement.delay_s *= k;
  out.duration_s = s.short_run.duration_s.value_or(s.duration_s * k);
  out.settle_s = s.short_run.settle_s.value_or(s.settle_s * k);
  for (auto& f : out.faults) {
    f.at_s *= k;
    f.spread_s *= k;
    f.deadline_s *= k;
    f.notice_after_s *= k;
    f.grace_s *= k;
    f.duration_s *= k;
    // stop_ms/period_ms describe how slow the node is, not when: they are not scaled.
    f.down_s *= k;
    // The same expected number of faults in a window `k` times as long.
    f.target.rate_per_node_hour /= k;
    if (f.target.window_end_s >= 0) {
      f.target.window_start_s *= k;
      f.target.window_end_s *= k;
    }
  }
  return out;
}

}  // namespace moerl::sims
