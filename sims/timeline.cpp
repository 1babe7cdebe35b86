#include "sims/timeline.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "sims/internal/sim_rng.h"

namespace moerl::sims {

roster canonical_roster(const cluster_spec& c) {
  roster r;
  auto numbered = [&](const std::string& role, int64_t n) {
    // 0-based, as up/local_cluster.h names the nodes of `moerl up`.
    for (int64_t i = 0; i < n; ++i) r[role].push_back(role + "-" + std::to_string(i));
  };
  r["coordinator"] = {"coordinator"};
  numbered("rollout", c.rollout);
  numbered("reward", c.reward);
  numbered("buffer", c.buffer);
  numbered("trainer", c.trainer_members);  // each hosting c.trainer_ranks ranks
  numbered("weights", c.weights);
  if (c.env > 0) numbered("env", c.env);
  return r;
}

namespace {

error entry_error(const scenario& s, const fault_spec& f, size_t index, const std::string& what) {
  return error{errc::invalid_config, s.file + ":" + std::to_string(f.line) + ": faults[" +
                                         std::to_string(index) + "]: " + what};
}

fault_event event_of(const scenario& s, const fault_spec& f, size_t index) {
  fault_event e;
  e.kind = f.kind;
  e.fault_index = index;
  e.line = f.line;
  e.deadline_s = f.deadline_s;
  e.notice_after_s = f.notice_after_s;
  e.grace_s = f.grace_s;
  e.duration_s = f.duration_s;
  e.stop_ms = f.stop_ms;
  e.period_ms = f.period_ms;
  e.down_s = f.down_s;
  e.phase = f.phase;
  e.replace = removes_node(f.kind) && f.replace.value_or(s.replacement.enabled) &&
              f.kind != fault_kind::coordinator_restart;
  e.replace_if_exits =
      !removes_node(f.kind) && f.kind != fault_kind::coordinator_restart && s.replacement.enabled;
  e.replace_delay_s = s.replacement.delay_s;
  return e;
}

}  // namespace

result<std::vector<fault_event>> expand(const scenario& s, const roster& nodes_in) {
  roster nodes = nodes_in;
  for (auto& [role, names] : nodes) std::sort(names.begin(), names.end());

  std::vector<fault_event> out;
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const fault_spec& f = s.faults[i];
    sim_rng rng(s.seed, i);
    fault_event base = event_of(s, f, i);

    if (!f.target.node.empty()) {
      std::string role;
      for (const auto& [r, names] : nodes) {
        if (std::find(names.begin(), names.end(), f.target.node) != names.end()) role = r;
      }
      if (role.empty()) {
        return entry_error(s, f, i, "node '" + f.target.node + "' is not in the cluster");
      }
      if (f.kind == fault_kind::coordinator_restart && role != "coordinator") {
        return entry_error(
            s, f, i,
            "coordinator_restart names '" + f.target.node + "', which is a " + role + " node");
      }
      fault_event e = base;
      e.node = f.target.node;
      e.role = role;
      e.at_s = f.at_s + rng.uniform() * f.spread_s;
      out.push_back(e);
      continue;
    }

    const auto it = nodes.find(f.target.role);
    const std::vector<std::string> empty;
    const std::vector<std::string>& names = it == nodes.end() ? empty : it->second;

    if (f.target.rate_per_node_hour > 0.0) {
      // An independent Poisson process per node: inter-arrival times are exponential.
      const double rate_per_s = f.target.rate_per_node_hour / 3600.0;
      const double start = f.target.window_start_s;
      const double end = f.target.window_end_s >= 0 ? f.target.window_end_s : s.duration_s;
      for (size_t n = 0; n < names.size(); ++n) {
        sim_rng node_rng(s.seed ^ (0x5bd1e995ULL * (n + 1)), i);
        for (double t = start + node_rng.exponential(rate_per_s); t < end;
             t += node_rng.exponential(rate_per_s)) {
          fault_event e = base;
          e.node = names[n];
          e.role = f.target.role;
          e.at_s = t;
          out.push_back(e);
        }
      }
      continue;
    }

    size_t want = static_cast<size_t>(f.target.count);
    if (f.target.fraction > 0.0) {
      // Rounds up: "a third of the rollout nodes" of 2 nodes is 1, never 0.
      want = static_cast<size_t>(std::ceil(f.target.fraction * names.size() - 1e-9));
    }
    if (want > names.size()) {
      return entry_error(s, f, i,
                         "wants " + std::to_string(want) + " " + f.target.role +
                             " node(s) but the cluster has " + std::to_string(names.size()));
    }
    // Partial Fisher-Yates over the sorted names: the first `want` are the choice.
    std::vector<std::string> pool = names;
    for (size_t k = 0; k < want; ++k) {
      const size_t j = k + static_cast<size_t>(rng.below(pool.size() - k));
      std::swap(pool[k], pool[j]);
    }
    for (size_t k = 0; k < want; ++k) {
      fault_event e = base;
      e.node = pool[k];
      e.role = f.target.role;
      e.at_s = f.at_s + rng.uniform() * f.spread_s;
      out.push_back(e);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const fault_event& a, const fault_event& b) {
    return std::tie(a.at_s, a.fault_index, a.node) < std::tie(b.at_s, b.fault_index, b.node);
  });
  return out;
}

nlohmann::json to_json(const fault_event& e) {
  nlohmann::json j = {{"at_s", e.at_s}, {"kind", fault_kind_name(e.kind)}, {"node", e.node},
                      {"role", e.role}, {"fault_index", e.fault_index},    {"line", e.line}};
  switch (e.kind) {
    case fault_kind::spot_notice: j["deadline_s"] = e.deadline_s; break;
    case fault_kind::rebalance_then_notice:
      j["deadline_s"] = e.deadline_s;
      j["notice_after_s"] = e.notice_after_s;
      break;
    case fault_kind::sigterm: j["grace_s"] = e.grace_s; break;
    case fault_kind::partition: j["duration_s"] = e.duration_s; break;
    case fault_kind::slow_node:
    case fault_kind::env_slow:
      j["duration_s"] = e.duration_s;
      j["stop_ms"] = e.stop_ms;
      j["period_ms"] = e.period_ms;
      break;
    case fault_kind::coordinator_restart: j["down_s"] = e.down_s; break;
    case fault_kind::hard_kill: j["phase"] = kill_phase_name(e.phase); break;
    case fault_kind::reward_crash:
    case fault_kind::shard_loss:
    case fault_kind::env_kill: break;
    case fault_kind::weights_loss: break;
  }
  if (e.replace) j["replace_after_s"] = e.replace_delay_s;
  return j;
}

nlohmann::json timeline_json(const std::vector<fault_event>& events) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& e : events) a.push_back(to_json(e));
  return a;
}

}  // namespace moerl::sims
