#include "console/autoscale_signal.h"

#include <algorithm>
#include <cmath>

namespace moerl::console {

using nlohmann::json;

namespace {

bool is_down(const std::string& state) {
  return state == "dead" || state == "drained" || state == "unreachable";
}

}  // namespace

void replacement_tracker::observe(const json& nodes, int64_t now_ms) {
  if (first_seen_ms_ < 0) first_seen_ms_ = now_ms;
  if (!nodes.is_array()) return;
  for (const auto& n : nodes) {
    const std::string id = n.value("id", std::string());
    const std::string role = n.value("role", std::string());
    const std::string state = n.value("state", std::string());
    if (is_down(state)) {
      if (down_.insert(id).second) waiting_[role].push_back(now_ms);
      continue;
    }
    // Productive: a rollout once it holds a lease, any other role once it runs. Nodes present
    // at the first look are the job's first generation, not replacements.
    const bool productive =
        state == "running" && (role != "rollout" || n.value("leases", uint64_t{0}) > 0);
    if (!productive || !up_.insert(id).second) continue;
    auto w = waiting_.find(role);
    if (w == waiting_.end() || w->second.empty()) continue;
    sum_replacement_s_ += double(now_ms - w->second.front()) / 1000.0;
    ++num_replacements_;
    w->second.pop_front();
  }
}

double replacement_tracker::mean_replacement_s() const {
  return num_replacements_ ? sum_replacement_s_ / double(num_replacements_) : -1.0;
}

json autoscale_json(const json& snapshot, const replacement_tracker& tracker, int64_t now_ms) {
  const json status = snapshot.value("status", json::object());
  const json nodes = snapshot.value("nodes", json::array());
  const json its = snapshot.value("iterations", json::object());
  const json list = its.value("iterations", json::array());
  std::map<std::string, uint64_t> running;
  uint64_t num_nodes = 0;
  for (const auto& n : nodes) {
    ++num_nodes;
    if (n.value("state", std::string()) == "running") ++running[n.value("role", std::string())];
  }
  const uint64_t queue_depth = status.value("queue_depth", uint64_t{0});
  const uint64_t leases = status.value("leases", uint64_t{0});
  const bool done = status.value("done", false);
  // The trainer's rate when it never waits (samples over its own busy time of the last
  // iteration) and one rollout worker's rate (the inverse of its time per sample).
  double consumption = 0, generation = 0;
  if (!list.empty()) {
    const json& last = list.back();
    const double busy =
        last.value("t_train", 0.0) + last.value("t_weights", 0.0) + last.value("t_checkpoint", 0.0);
    if (busy > 0) consumption = last.value("samples", 0.0) / busy;
    const double ms = last.value("generate_ms_per_sample", 0.0);
    if (ms > 0) generation = 1000.0 / ms;
  }
  // Interruptions per node-second since the console first looked, and the time a replacement
  // took: the share of capacity that is out at any moment is about rate x replacement time.
  const json interruptions = snapshot.value("interruptions", json::array());
  const double uptime_s =
      tracker.first_seen_ms() >= 0 ? double(now_ms - tracker.first_seen_ms()) / 1000.0 : 0.0;
  const double rate = uptime_s > 0 && num_nodes > 0
                          ? double(interruptions.size()) / (uptime_s * double(num_nodes))
                          : 0.0;
  const double replacement_s = tracker.mean_replacement_s();
  const double out_share = std::min(0.5, rate * std::max(0.0, replacement_s));
  const double headroom = 1.0 / (1.0 - out_share);
  const uint64_t rollouts_now = std::max<uint64_t>(running["rollout"], 1);
  double base = generation > 0 && consumption > 0 ? consumption / generation : double(rollouts_now);
  uint64_t desired = static_cast<uint64_t>(std::ceil(base * headroom - 1e-9));
  // Never more replicas than units there are to lease, never fewer than one while work is left.
  desired = std::clamp<uint64_t>(desired, 1, std::max<uint64_t>(queue_depth + leases, 1));
  if (done) desired = 0;
  const uint64_t env_now = running["env"];
  const uint64_t desired_env =
      env_now == 0 ? 0
                   : static_cast<uint64_t>(std::ceil(
                         double(desired) * double(env_now) / double(rollouts_now) - 1e-9));
  return json{{"desired_replicas", {{"rollout", desired}, {"env", desired_env}}},
              {"running", running},
              {"inputs",
               {{"queue_depth", queue_depth},
                {"leases", leases},
                {"trainer_consumption_samples_per_s", consumption},
                {"rollout_generation_samples_per_s", generation},
                {"replacement_s", replacement_s},
                {"num_replacements", tracker.num_replacements()},
                {"interruptions_per_node_s", rate},
                {"done", done}}},
              {"terms", {{"base", base}, {"out_share", out_share}, {"headroom", headroom}}},
              {"formula",
               "rollout = clamp(ceil(consumption / generation * 1 / (1 - min(0.5, "
               "interruption_rate * replacement_s))), 1, queue_depth + leases); 0 when done; "
               "env = ceil(rollout * env_running / rollout_running)"}};
}

}  // namespace moerl::console
