#include "console/prometheus_text.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

namespace moerl::console {

using nlohmann::json;

namespace {

using labels = std::vector<std::pair<std::string, std::string>>;

// Label values escape backslash, double quote and newline (the exposition format's rule).
std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// One metric family: HELP and TYPE once, then its samples.
class family_writer {
 public:
  explicit family_writer(std::ostringstream& out) : out_(out) {}
  void family(const std::string& name, const char* type, const std::string& help) {
    name_ = name;
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void sample(double v, const labels& ls = {}) {
    out_ << name_;
    if (!ls.empty()) {
      out_ << "{";
      for (size_t i = 0; i < ls.size(); ++i)
        out_ << (i ? "," : "") << ls[i].first << "=\"" << escape(ls[i].second) << "\"";
      out_ << "}";
    }
    out_ << " " << number(v) << "\n";
  }
  void one(const std::string& name, const char* type, const std::string& help, double v) {
    family(name, type, help);
    sample(v);
  }

 private:
  std::ostringstream& out_;
  std::string name_;
};

double num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

std::string prometheus_text(const json& snapshot, const json& autoscale) {
  std::ostringstream out;
  family_writer w(out);
  const json status = snapshot.value("status", json::object());
  const json acct = status.value("accounting", json::object());
  const json nodes = snapshot.value("nodes", json::array());
  const json its = snapshot.value("iterations", json::object());
  const json list = its.value("iterations", json::array());
  const json last = list.empty() ? json::object() : list.back();

  w.one("moerl_iteration", "gauge", "policy iterations completed (the current policy version)",
        num(status, "iteration"));
  w.one("moerl_iterations_target", "gauge", "policy iterations the job runs",
        num(status, "iterations"));
  w.one("moerl_units", "gauge", "work units the ledger holds", num(status, "units"));
  w.one("moerl_queue_depth_units", "gauge", "work units pending (waiting for a rollout worker)",
        num(status, "queue_depth"));
  w.one("moerl_leases", "gauge", "open leases", num(status, "leases"));
  w.one("moerl_nodes_alive", "gauge", "nodes running or draining", num(status, "nodes_alive"));

  // The accounting (ledger/LEDGER.md): dispatched = committed + in_flight + dropped + lost.
  w.one("moerl_samples_dispatched_total", "counter", "sample slots handed to workers",
        num(acct, "dispatched"));
  w.one("moerl_samples_committed", "gauge",
        "sample slots committed and still held or trained (a lost shard lowers it)",
        num(acct, "committed"));
  w.one("moerl_samples_in_flight", "gauge", "sample slots of open leases", num(acct, "in_flight"));
  w.one("moerl_samples_trained_total", "counter", "committed samples handed to a trainer",
        num(acct, "trained"));
  w.one("moerl_samples_lost", "gauge",
        "sample slots the ledger cannot place in any bucket (must be 0)", num(acct, "lost"));
  w.one("moerl_samples_duplicated_total", "counter",
        "samples handed to a trainer more than once (must be 0)", num(acct, "duplicated"));
  w.family("moerl_samples_dropped_total", "counter",
           "dispatched sample slots that ended uncommitted, by reason");
  const json dropped = acct.value("dropped", json::object());  // items() must not outlive it
  for (const auto& [reason, n] : dropped.items())
    w.sample(n.is_number() ? n.get<double>() : 0.0, {{"reason", reason}});
  w.one("moerl_accounting_invariant_ok", "gauge", "1 while the accounting invariant holds",
        status.value("invariant_ok", false) ? 1 : 0);
  w.one("moerl_invariant_violations_total", "counter",
        "times the coordinator's periodic check found the invariant broken",
        num(status, "invariant_violations"));

  // The coordinator's TLS port (actors/tls_acceptor.h): handshakes finished and connections
  // refused, by reason (a handshake storm shows here before anywhere else).
  const json control_plane = status.value("control_plane", json::object());
  w.one("moerl_control_plane_tls_accepted_total", "counter",
        "TLS handshakes the coordinator's port finished", num(control_plane, "accepted"));
  w.family("moerl_control_plane_tls_refused_total", "counter",
           "connections the coordinator's TLS port refused, by reason");
  const json refused =
      control_plane.value("refused", json::object());  // items() must not outlive it
  for (const auto& [reason, n] : refused.items())
    w.sample(n.is_number() ? n.get<double>() : 0.0, {{"reason", reason}});
  w.family("moerl_coordinator_messages_total", "counter",
           "messages the coordinator handled since it started, by kind (flush: a journal sync)");
  const json handled =
      control_plane.value("messages", json::object());  // items() must not outlive it
  for (const auto& [kind, n] : handled.items())
    w.sample(n.is_number() ? n.get<double>() : 0.0, {{"kind", kind}});

  // Learning and speed.
  w.one("moerl_reward_mean", "gauge", "mean reward of the last policy iteration",
        num(last, "mean_reward"));
  w.one("moerl_reward_random", "gauge", "expected reward of the random policy on the task",
        num(its, "reward_random"));
  w.one("moerl_reward_max", "gauge", "highest reward the task gives", num(its, "reward_max"));
  w.one("moerl_samples_per_second", "gauge",
        "samples the trainer took per second over its last iterations", num(its, "samples_per_s"));
  w.one("moerl_policy_staleness_versions", "gauge",
        "mean policy versions a trained sample lagged in the last iteration",
        num(last, "staleness"));
  w.family("moerl_iteration_phase_seconds", "gauge",
           "the last iteration's time per phase (generate, env and reward: summed over samples)");
  for (const auto& [phase, key] :
       std::vector<std::pair<const char*, const char*>>{{"generate", "t_generate"},
                                                        {"env", "t_env"},
                                                        {"reward", "t_reward"},
                                                        {"buffer", "t_buffer"},
                                                        {"train", "t_train"},
                                                        {"weights_publish", "t_weights"},
                                                        {"checkpoint", "t_checkpoint"}})
    w.sample(num(last, key), {{"phase", phase}});

  // Nodes.
  std::map<std::pair<std::string, std::string>, uint64_t> by_role_state;
  for (const auto& n : nodes)
    ++by_role_state[{n.value("role", std::string()), n.value("state", std::string())}];
  w.family("moerl_nodes", "gauge", "nodes by role and state");
  for (const auto& [k, n] : by_role_state)
    w.sample(double(n), {{"role", k.first}, {"state", k.second}});
  w.family("moerl_node_restarts_total", "counter", "actor restarts a node's supervisor made");
  for (const auto& n : nodes)
    w.sample(num(n, "restarts"),
             {{"node", n.value("name", std::string())}, {"role", n.value("role", std::string())}});
  w.family("moerl_node_leases", "gauge", "leases a rollout node holds");
  for (const auto& n : nodes)
    if (n.value("role", std::string()) == "rollout")
      w.sample(num(n, "leases"), {{"node", n.value("name", std::string())}});
  w.family("moerl_buffer_resident_samples", "gauge", "samples a buffer shard holds");
  for (const auto& n : nodes)
    if (n.value("role", std::string()) == "buffer" && n.contains("stats"))
      w.sample(num(n["stats"], "resident_samples"), {{"node", n.value("name", std::string())}});
  w.family("moerl_buffer_capacity_samples", "gauge", "samples a buffer shard can hold");
  for (const auto& n : nodes)
    if (n.value("role", std::string()) == "buffer" && n.contains("stats"))
      w.sample(num(n["stats"], "capacity_samples"), {{"node", n.value("name", std::string())}});
  w.family("moerl_weights_versions_served_total", "counter",
           "policy versions a weights node has served");
  for (const auto& n : nodes)
    if (n.value("role", std::string()) == "weights" && n.contains("stats"))
      w.sample(num(n["stats"], "versions_seen"), {{"node", n.value("name", std::string())}});

  // Interruptions, by where they came from.
  std::map<std::string, uint64_t> by_source;
  for (const auto& r : snapshot.value("interruptions", json::array()))
    ++by_source[r.is_object() ? r.value("source", std::string("unknown")) : "unknown"];
  w.family("moerl_interruptions_total", "counter", "interruptions recorded, by source");
  for (const auto& [source, n] : by_source) w.sample(double(n), {{"source", source}});

  // The autoscaling signal (console/CONSOLE.md).
  const json in = autoscale.value("inputs", json::object());
  w.family("moerl_desired_replicas", "gauge", "replicas the autoscaling signal asks for, by role");
  const json desired = autoscale.value("desired_replicas", json::object());
  for (const auto& [role, n] : desired.items())
    w.sample(n.is_number() ? n.get<double>() : 0.0, {{"role", role}});
  w.one("moerl_replacement_seconds", "gauge",
        "mean time from a node's loss to its replacement being productive (-1: none yet)",
        in.value("replacement_s", -1.0));
  w.one("moerl_interruption_rate_per_node_second", "gauge",
        "interruptions per node per second since the console started",
        num(in, "interruptions_per_node_s"));
  return out.str();
}

}  // namespace moerl::console
