#include "sims/report.h"

#include <cstdio>
#include <numeric>
#include <sstream>

namespace moerl::sims {

namespace {

// A required unsigned counter from the accounting object, or nullopt with why in `why`.
std::optional<uint64_t> counter(const nlohmann::json& acc, const char* key, std::string& why) {
  if (!acc.is_object() || !acc.contains(key)) {
    why = std::string("accounting has no '") + key + "'";
    return std::nullopt;
  }
  const auto& v = acc.at(key);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    why = std::string("accounting.") + key + " is not a non-negative integer";
    return std::nullopt;
  }
  return v.get<uint64_t>();
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

nlohmann::json time_or_null(double t) { return t < 0 ? nlohmann::json() : nlohmann::json(t); }

// The share of a watched window spent stalled: the fault run and the baseline watch windows
// of different lengths, so their totals alone do not compare.
nlohmann::json share_or_null(double stall_s, double window_s) {
  return stall_s < 0 || window_s <= 0 ? nlohmann::json() : nlohmann::json(stall_s / window_s);
}

// "3.20s of 40.0s (8%)", or "(not reported)".
std::string stall_text(const nlohmann::json& stall, const nlohmann::json& window) {
  if (!stall.is_number()) return "(not reported)";
  char buf[96];
  const double w = window.is_number() ? window.get<double>() : 0.0;
  if (w > 0) {
    std::snprintf(buf, sizeof buf, "%.2fs of %.1fs (%.0f%%)", stall.get<double>(), w,
                  100.0 * stall.get<double>() / w);
  } else {
    std::snprintf(buf, sizeof buf, "%.2fs", stall.get<double>());
  }
  return buf;
}

std::string fmt_s(const nlohmann::json& t) {
  if (!t.is_number()) return "never";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fs", t.get<double>());
  return buf;
}

// Trainer restarts that no fault on a trainer explains: restarts of trainers in no group
// (not judged once a fault targeted one), and re-formations of the trainer group that
// no fault on one of its members explains. Each injected fault on a trainer explains one
// re-formation: the first whose cause names its node (or its replacement), else the earliest
// one left (a survivor whose step failed first may be the one named).
invariant_verdict trainer_not_restarted_by_rollout_loss(const run_measurements& m) {
  std::vector<const fault_record*> trainer_faults;
  bool ungrouped_targeted = false;
  for (const auto& f : m.faults) {
    if (f.planned.role != "trainer" || !f.skipped.empty() || f.injected_at < 0) continue;
    trainer_faults.push_back(&f);
    ungrouped_targeted = ungrouped_targeted || f.group.empty();
  }
  std::vector<std::string> causes;
  for (const auto& r : m.trainer_group_reformations)
    causes.push_back(r.is_object() ? r.value("cause", std::string()) : std::string());
  std::vector<bool> explained(causes.size(), false);
  auto names = [](const std::string& cause, const std::string& node) {
    return !node.empty() && cause.rfind(node + " ", 0) == 0;
  };
  for (const fault_record* f : trainer_faults) {
    size_t pick = causes.size();
    for (size_t i = 0; i < causes.size() && pick == causes.size(); ++i)
      if (!explained[i] && (names(causes[i], f->node) || names(causes[i], f->replacement)))
        pick = i;
    for (size_t i = 0; i < causes.size() && pick == causes.size(); ++i)
      if (!explained[i]) pick = i;
    if (pick < causes.size()) explained[pick] = true;
  }
  std::string unexplained;
  size_t num_unexplained = 0;
  for (size_t i = 0; i < causes.size(); ++i) {
    if (explained[i]) continue;
    ++num_unexplained;
    unexplained += (unexplained.empty() ? "" : "; ") + causes[i];
  }
  const bool judge_ungrouped = !ungrouped_targeted;
  const bool ok = num_unexplained == 0 && (!judge_ungrouped || m.ungrouped_trainer_restarts == 0);
  std::string detail = judge_ungrouped ? std::to_string(m.ungrouped_trainer_restarts) +
                                             " restart(s) of trainers in no group"
                                       : "trainers in no group not judged (a fault targeted one)";
  detail += "; " + std::to_string(causes.size()) + " trainer group re-formation(s)";
  if (num_unexplained > 0)
    detail +=
        ", " + std::to_string(num_unexplained) + " not from a fault on a member: " + unexplained;
  else if (!causes.empty())
    detail += ", each from a fault on a member";
  return {"trainer_not_restarted_by_rollout_loss", ok, detail};
}

}  // namespace

std::vector<invariant_verdict> evaluate_invariants(const run_measurements& m) {
  std::vector<invariant_verdict> out;
  const nlohmann::json& acc = m.accounting;

  std::string why;
  const auto dispatched = counter(acc, "dispatched", why);
  const auto committed = counter(acc, "committed", why);
  const auto in_flight = counter(acc, "in_flight", why);
  const auto lost = counter(acc, "lost", why);
  const auto duplicated = counter(acc, "duplicated", why);
  const auto trained = counter(acc, "trained", why);
  uint64_t dropped = 0;
  bool dropped_ok = acc.is_object() && acc.contains("dropped") && acc.at("dropped").is_object();
  if (dropped_ok) {
    for (const auto& [reason, n] : acc.at("dropped").items()) {
      if (!n.is_number_integer() || n.get<int64_t>() < 0) {
        dropped_ok = false;
        why = "accounting.dropped." + reason + " is not a non-negative integer";
        break;
      }
      dropped += n.get<uint64_t>();
    }
  } else if (why.empty()) {
    why = "accounting has no 'dropped' object";
  }
  const bool complete =
      dispatched && committed && in_flight && lost && duplicated && trained && dropped_ok;
  out.push_back(
      {"accounting_reported", complete, complete ? "the coordinator reported every counter" : why});

  auto counted = [&](const char* name, const std::optional<uint64_t>& v) {
    if (!v) {
      out.push_back({name, false, "not reported"});
    } else {
      out.push_back({name, *v == 0, std::to_string(*v)});
    }
  };
  counted("lost_is_zero", lost);
  counted("duplicated_is_zero", duplicated);

  if (complete) {
    const uint64_t rhs = *committed + *in_flight + dropped;
    out.push_back({"accounting_balances", *dispatched == rhs,
                   "dispatched " + std::to_string(*dispatched) +
                       " vs committed + in_flight + "
                       "dropped = " +
                       std::to_string(*committed) + " + " + std::to_string(*in_flight) + " + " +
                       std::to_string(dropped) + " = " + std::to_string(rhs)});
    out.push_back(
        {"trained_at_most_committed", *trained <= *committed,
         "trained " + std::to_string(*trained) + ", committed " + std::to_string(*committed)});
    // Guards against a vacuous pass: a job that did nothing trivially loses nothing.
    out.push_back({"job_made_progress", *committed > 0,
                   "committed " + std::to_string(*committed) + " sample slots"});
  } else {
    out.push_back({"accounting_balances", false, "accounting incomplete: " + why});
    out.push_back({"trained_at_most_committed", false, "accounting incomplete: " + why});
    out.push_back({"job_made_progress", false, "accounting incomplete: " + why});
  }

  out.push_back(trainer_not_restarted_by_rollout_loss(m));

  std::string lost_nodes;
  for (const auto& n : m.collateral_losses) lost_nodes += (lost_nodes.empty() ? "" : ", ") + n;
  out.push_back({"no_collateral_node_loss", m.collateral_losses.empty(),
                 m.collateral_losses.empty() ? "every node that went away was a fault's target"
                                             : "went away without a fault: " + lost_nodes});

  size_t injected = 0, undetected = 0, unrecovered = 0;
  std::string first_undetected, first_unrecovered;
  for (const auto& f : m.faults) {
    if (!f.skipped.empty() || f.injected_at < 0) continue;
    ++injected;
    // A slow node keeps heartbeating between stops, so detection is not required of it.
    if (!is_duty_cycle(f.planned.kind) && f.detected_at < 0) {
      if (!undetected++)
        first_undetected = std::string(fault_kind_name(f.planned.kind)) + " " + f.node;
    }
    if (f.recovered_at < 0) {
      if (!unrecovered++)
        first_unrecovered = std::string(fault_kind_name(f.planned.kind)) + " " + f.node;
    }
  }
  out.push_back({"every_fault_detected", undetected == 0,
                 undetected ? std::to_string(undetected) + " of " + std::to_string(injected) +
                                  " not detected, first: " + first_undetected
                            : std::to_string(injected) + " injected, all detected"});
  out.push_back({"every_fault_recovered", unrecovered == 0,
                 unrecovered ? std::to_string(unrecovered) + " of " + std::to_string(injected) +
                                   " not recovered, first: " + first_unrecovered
                             : std::to_string(injected) + " injected, all recovered"});
  return out;
}

std::string overall_verdict(const run_measurements& m, const std::vector<invariant_verdict>& v) {
  // A broken invariant fails the run even when no fault could be injected: the job itself
  // lost or duplicated samples.
  for (const auto& x : v) {
    if (!x.ok) return "fail";
  }
  bool all_skipped = !m.faults.empty();
  for (const auto& f : m.faults) {
    if (f.skipped.empty()) all_skipped = false;
  }
  return all_skipped ? "skipped" : "pass";
}

nlohmann::json report_json(const run_measurements& m, const std::vector<invariant_verdict>& v,
                           const nlohmann::json& provenance) {
  nlohmann::json faults = nlohmann::json::array();
  for (const auto& f : m.faults) {
    nlohmann::json j = {{"kind", fault_kind_name(f.planned.kind)},
                        {"node", f.node.empty() ? f.planned.node : f.node},
                        {"role", f.planned.role},
                        {"planned_at", f.planned.at_s},
                        {"injected_at", time_or_null(f.injected_at)},
                        {"detected_at", time_or_null(f.detected_at)},
                        {"recovered_at", time_or_null(f.recovered_at)}};
    if (f.injected_at >= 0 && f.recovered_at >= 0) {
      j["recovery_s"] = f.recovered_at - f.injected_at;
    }
    if (!f.replacement.empty()) j["replacement"] = f.replacement;
    if (!f.group.empty()) j["group"] = f.group;
    if (!f.skipped.empty()) j["skipped"] = f.skipped;
    if (!f.note.empty()) j["note"] = f.note;
    if (f.trainer_stall_s >= 0) j["trainer_stall_s"] = f.trainer_stall_s;
    faults.push_back(j);
  }
  nlohmann::json inv = nlohmann::json::array();
  for (const auto& x : v) inv.push_back({{"name", x.name}, {"ok", x.ok}, {"detail", x.detail}});

  nlohmann::json r = {{"scenario", m.scenario},
                      {"file", m.file},
                      {"seed", m.seed},
                      {"short", m.short_form},
                      {"target", m.target},
                      {"wall_s", m.wall_s},
                      {"faults", faults},
                      {"accounting", m.accounting},
                      {"units", m.units},
                      {"shards", m.shards},
                      {"env_episodes_failed", m.env_episodes_failed},
                      {"collateral_losses", m.collateral_losses},
                      {"trainer_stall_s", time_or_null(m.trainer_stall_s)},
                      {"trainer_stall_fraction", share_or_null(m.trainer_stall_s, m.observed_s)},
                      {"baseline_trainer_stall_s", time_or_null(m.baseline_trainer_stall_s)},
                      {"baseline_trainer_stall_fraction",
                       share_or_null(m.baseline_trainer_stall_s, m.baseline_observed_s)},
                      {"observed_s", m.observed_s},
                      {"baseline_observed_s", m.baseline_observed_s},
                      {"trainer_restarts", m.trainer_restarts},
                      {"trainer_group_reformations", m.trainer_group_reformations},
                      {"rollout_group_reformations", m.rollout_group_reformations},
                      {"iteration_s", m.iteration_s},
                      {"baseline_iteration_s", m.baseline_iteration_s},
                      {"mean_iteration_s", mean(m.iteration_s)},
                      {"baseline_mean_iteration_s", mean(m.baseline_iteration_s)},
                      {"invariants", inv},
                      {"verdict", overall_verdict(m, v)},
                      {"provenance", provenance}};
  if (!m.baseline_note.empty()) r["baseline_note"] = m.baseline_note;
  if (!m.work_dir.empty()) r["work_dir"] = m.work_dir;
  return r;
}

std::string human_summary(const nlohmann::json& r) {
  std::ostringstream os;
  os << "scenario " << r.value("scenario", std::string("?")) << " (seed " << r.value("seed", 0)
     << (r.value("short", false) ? ", short form" : "") << ") against "
     << r.value("target", std::string("?")) << ": " << r.value("verdict", std::string("?")) << "\n";
  os << "faults:\n";
  for (const auto& f : r.value("faults", nlohmann::json::array())) {
    os << "  " << f.value("kind", std::string("?")) << " " << f.value("node", std::string("?"));
    if (f.contains("skipped")) {
      os << ": skipped (" << f["skipped"].get<std::string>() << ")\n";
      continue;
    }
    os << ": injected " << fmt_s(f["injected_at"]) << ", detected " << fmt_s(f["detected_at"])
       << ", recovered " << fmt_s(f["recovered_at"]);
    if (f.contains("replacement")) os << " by " << f["replacement"].get<std::string>();
    if (f.contains("note")) os << " [" << f["note"].get<std::string>() << "]";
    os << "\n";
  }
  const auto& acc = r["accounting"];
  if (acc.is_object()) {
    os << "accounting: dispatched " << acc.value("dispatched", 0) << ", committed "
       << acc.value("committed", 0) << ", in flight " << acc.value("in_flight", 0) << ", trained "
       << acc.value("trained", 0) << ", lost " << acc.value("lost", 0) << ", duplicated "
       << acc.value("duplicated", 0) << "\n";
    if (acc.contains("dropped") && acc["dropped"].is_object()) {
      os << "dropped:";
      if (acc["dropped"].empty()) os << " none";
      for (const auto& [reason, n] : acc["dropped"].items()) os << " " << reason << "=" << n;
      os << "\n";
    }
  } else {
    os << "accounting: not reported\n";
  }
  if (r.contains("shards") && r["shards"].is_object() && !r["shards"].empty()) {
    os << "shards refused:";
    for (const auto& [what, n] : r["shards"].items()) os << " " << what << "=" << n;
    os << "\n";
  }
  if (r.contains("env_episodes_failed") && r["env_episodes_failed"].is_object() &&
      !r["env_episodes_failed"].empty()) {
    os << "env episodes failed:";
    for (const auto& [why, n] : r["env_episodes_failed"].items()) os << " " << why << "=" << n;
    os << "\n";
  }
  char line[160];
  std::snprintf(line, sizeof line, "iterations: %zu, mean %.2fs; baseline %zu, mean %.2fs",
                r.value("iteration_s", nlohmann::json::array()).size(),
                r.value("mean_iteration_s", 0.0),
                r.value("baseline_iteration_s", nlohmann::json::array()).size(),
                r.value("baseline_mean_iteration_s", 0.0));
  os << line << "\n";
  os << "trainer stalled "
     << stall_text(r.value("trainer_stall_s", nlohmann::json()),
                   r.value("observed_s", nlohmann::json()))
     << "; baseline "
     << stall_text(r.value("baseline_trainer_stall_s", nlohmann::json()),
                   r.value("baseline_observed_s", nlohmann::json()))
     << "\n";
  for (const char* role : {"trainer", "rollout"})
    for (const auto& g :
         r.value(std::string(role) + "_group_reformations", nlohmann::json::array())) {
      if (!g.is_object()) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.2fs",
                    g.value("downtime_s", nlohmann::json()).is_number()
                        ? g["downtime_s"].get<double>()
                        : -1.0);
      os << role << " group " << g.value("group", std::string("?"))
         << " re-formed: " << g.value("cause", std::string("?")) << "; down "
         << (g.value("downtime_s", nlohmann::json()).is_number() ? buf : "(not re-formed)")
         << ", restored version " << g.value("restored_version", nlohmann::json()).dump() << "\n";
    }
  if (r.contains("baseline_note"))
    os << "baseline: " << r["baseline_note"].get<std::string>() << "\n";
  os << "invariants:\n";
  for (const auto& x : r.value("invariants", nlohmann::json::array())) {
    os << "  [" << (x.value("ok", false) ? "ok  " : "FAIL") << "] "
       << x.value("name", std::string("?")) << ": " << x.value("detail", std::string()) << "\n";
  }
  return os.str();
}

}  // namespace moerl::sims
