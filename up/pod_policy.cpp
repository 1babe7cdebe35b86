#include "up/pod_policy.h"

#include <sys/wait.h>

#include <algorithm>

namespace moerl::up {
namespace {

constexpr actors::node_role kAllRoles[] = {
    actors::node_role::coordinator, actors::node_role::buffer, actors::node_role::trainer,
    actors::node_role::weights,     actors::node_role::reward, actors::node_role::env,
    actors::node_role::rollout};

}  // namespace

pod_controller controller_of(actors::node_role role) {
  // deploy/base/: coordinator.yaml, buffer.yaml and trainer.yaml are StatefulSets; env,
  // reward, rollout and weights are Deployments.
  switch (role) {
    case actors::node_role::coordinator:
    case actors::node_role::buffer:
    case actors::node_role::trainer: return pod_controller::stateful_set;
    case actors::node_role::rollout:
    case actors::node_role::reward:
    case actors::node_role::env:
    case actors::node_role::weights: return pod_controller::deployment;
  }
  return pod_controller::deployment;
}

pod_controller controller_of(const std::string& role) {
  auto r = actors::parse_role(role);
  return r ? controller_of(*r) : pod_controller::deployment;
}

const char* controller_name(pod_controller c) {
  return c == pod_controller::stateful_set ? "StatefulSet" : "Deployment";
}

nlohmann::json restart_policy_json() {
  nlohmann::json out = nlohmann::json::object();
  for (actors::node_role role : kAllRoles) {
    const pod_controller c = controller_of(role);
    out[to_string(role)] =
        std::string(controller_name(c)) + (c == pod_controller::stateful_set
                                               ? ": recreated with the same name"
                                               : ": replaced by a node with a new name");
  }
  return out;
}

result<restart_limits> restart_limits::from_config(const config& cfg) {
  restart_limits l;
  auto in_range = [&](const char* key, int64_t lo, int64_t hi) -> result<int64_t> {
    const int64_t v = cfg.get_int(key);
    if (v < lo || v > hi) {
      return error(errc::invalid_config, std::string(key) + " must be in " + std::to_string(lo) +
                                             ".." + std::to_string(hi) + ", got " +
                                             std::to_string(v));
    }
    return v;
  };
  auto delay = in_range("cluster.restart_delay_ms", 0, 600000);
  if (!delay) return delay.err();
  auto max_delay = in_range("cluster.restart_backoff_max_ms", *delay, 3600000);
  if (!max_delay) return max_delay.err();
  auto max_restarts = in_range("cluster.max_restarts", 0, 1000000);
  if (!max_restarts) return max_restarts.err();
  l.delay = std::chrono::milliseconds(*delay);
  l.backoff_max = std::chrono::milliseconds(*max_delay);
  l.max_restarts = *max_restarts;
  return l;
}

std::chrono::milliseconds restart_limits::delay_after(int64_t num_replaced) const {
  auto d = delay;
  for (int64_t i = 0; i < num_replaced && d < backoff_max; ++i) d *= 2;
  return std::min(d, backoff_max);
}

std::optional<std::string> gave_up(int wait_status) {
  if (!WIFEXITED(wait_status)) return std::nullopt;
  switch (WEXITSTATUS(wait_status)) {
    case 2: return "it refused its configuration or could not start its services (exit code 2)";
    case 4: return "its supervisor reached actors.restart_intensity and gave up (exit code 4)";
    default: return std::nullopt;
  }
}

nlohmann::json replacement_record::to_json() const {
  nlohmann::json j{{"node", node},
                   {"replacement", replacement},
                   {"role", role},
                   {"cause", cause},
                   {"at_s", at_s},
                   {"delay_ms", delay_ms},
                   {"started_unix_ms", started_unix_ms}};
  if (!error.empty()) j["error"] = error;
  if (!moved.empty()) j["moved"] = moved;
  return j;
}

}  // namespace moerl::up
