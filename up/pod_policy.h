// How the local cluster (up/local_job.h) replaces its nodes: as the pod controllers of
// deploy/base/ would. A Deployment role's pod that ends is replaced by a new pod with a new
// name; a StatefulSet role's pod is recreated with the same name (a buffer shard keeps its
// shard name, the coordinator its journal, the trainer its place). Each replacement waits a
// delay that doubles per replacement of the same node (the kubelet's CrashLoopBackOff) up to
// a bound, and a node replaced cluster.max_restarts times ends the job: it cannot make
// progress that way. A node that gave up on its own (see gave_up()) is not replaced at all.
// Plain values; thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/node_role.h"
#include "common/config.h"
#include "common/error.h"

namespace moerl::up {

enum class pod_controller { deployment, stateful_set };

// The controller of a role's pods in deploy/base/<role>.yaml (tests/deploy checks the
// manifests name these roles).
pod_controller controller_of(actors::node_role role);
// The same for a role as node specs and reports spell it (to_string(node_role)); a name that
// is no role gets a Deployment's policy (replaced, never recreated under its name).
pod_controller controller_of(const std::string& role);
// "Deployment" / "StatefulSet", as the manifests spell it.
const char* controller_name(pod_controller c);
// Every role with its controller and what a dead pod becomes, for reports.
nlohmann::json restart_policy_json();

// cluster.restart_delay_ms, cluster.restart_backoff_max_ms, cluster.max_restarts.
struct restart_limits {
  std::chrono::milliseconds delay{1000};
  std::chrono::milliseconds backoff_max{8000};
  int64_t max_restarts = 5;

  // errc::invalid_config naming the key when a value is out of range.
  static result<restart_limits> from_config(const config& cfg);
  // The wait before a node's next replacement when it was replaced `num_replaced` times.
  std::chrono::milliseconds delay_after(int64_t num_replaced) const;
};

// Why an exit is the node giving up, so that a replacement would fail the same way; nullopt
// for an exit a replacement recovers from (a signal, exit code 0 after a drain, exit code 3
// after losing the coordinator). Exit code 2: the node refused its configuration or could
// not start its services; exit code 4: its supervisor reached actors.restart_intensity
// (apps/cmd_node.cpp, actors/node_agent.cpp).
std::optional<std::string> gave_up(int wait_status);

// One replacement, as the report lists it.
struct replacement_record {
  std::string node;         // the node that ended
  std::string replacement;  // the node started in its place (the same name for a StatefulSet)
  std::string role;
  std::string cause;  // "exit code 3", "killed by SIGKILL"
  double at_s = 0;    // seconds since the job started, when the replacement was started
  int64_t delay_ms = 0;
  int64_t started_unix_ms = 0;  // wall clock when the replacement was started
  std::string error;            // why the replacement failed to start; "" when it started
  // A recreated coordinator whose console address was taken while it was down: where its
  // consoles are now ("console at tcp://..." / "dashboard at HOST:PORT"); "" when unchanged.
  std::string moved;

  nlohmann::json to_json() const;
};

}  // namespace moerl::up
