// How the runner's faults reach a node (sims/runner.h). The timeline, the state machine of each
// fault and every measurement are the runner's, whatever the job runs on; only the hands that
// strike a node and start its replacement differ, and they are one of these backends:
//
//   processes  (local mode, and --against a job whose nodes run on this host): a signal to the
//              pid the console lists, liveness from /proc, a replacement started with the
//              removed node's own command line (read from /proc while it ran).
//   command    (--deliver-via CMD, e.g. `scripts/pods.sh fault` for nodes in pods): each blow
//              runs `CMD ACTION NODE [ARG]` in the background and the node counts as gone
//              once that command exits 0 (so ACTION must return only when the node's process
//              has exited); a replacement runs `CMD replace NODE NAME` and the last line of
//              its output is the replacement's node name, printed once that node joined.
//              Actions:
//                kill NODE             a node loss (pods: podman pod kill -s KILL)
//                terminate NODE GRACE  a drain: SIGTERM, SIGKILL after the grace (pods:
//                                      podman stop --time terminationGracePeriodSeconds)
//                stop NODE / cont NODE freeze and thaw every process of the node (run to
//                                      completion; pods: podman pause / unpause)
//                replace NODE NAME     the controller's replacement (NAME: the runner's
//                                      name for it, which a platform that names pods itself
//                                      may ignore)
//              The command's output goes to LOG_DIR/deliver-<node>-<action>.log.
// Not thread-safe: the runner's one thread calls every function.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "sims/job_console.h"
#include "sims/process_control.h"

namespace moerl::sims {

// The node a blow is aimed at: its name in the console, its role and the pid the console
// listed when the fault was injected (0 if none).
struct node_ref {
  std::string name;
  std::string role;
  pid_t pid = 0;
};

enum class blow {
  kill,       // SIGKILL: the node is lost at once
  terminate,  // SIGTERM: the node drains; SIGKILL after the grace if it is still alive
  stop,       // SIGSTOP (every process of the node)
  cont,       // SIGCONT
};

class fault_delivery {
 public:
  virtual ~fault_delivery() = default;

  // "" when blows can reach this node, else why not (the fault is then skipped with it).
  virtual std::string why_not_reachable(const node_view& n) const = 0;
  // Strikes the node; errc::not_found when its process was already gone. `grace_s` is the
  // terminate blow's grace.
  virtual status deliver(const node_ref& n, blow b, double grace_s) = 0;
  // Whether the node's process is gone; nullopt when this backend cannot tell yet (the
  // runner then goes by the console: dead or drained).
  virtual std::optional<bool> gone(const node_ref& n) = 0;
  // True when the backend itself SIGKILLs a terminated node after its grace (the platform
  // does, as the kubelet does); false: the runner does, with a kill blow.
  virtual bool enforces_grace() const = 0;
  // Starts the replacement of `n` under `name` (a StatefulSet's pod keeps its name, a
  // Deployment's gets a new one: up/pod_policy.h). Poll replacement() for its node name.
  virtual status start_replacement(const node_ref& n, const std::string& name) = 0;
  // The replacement's node name once it started; "" while it is still starting; an error
  // when starting it failed.
  virtual result<std::string> replacement(const std::string& old_name) = 0;
  // Processes this backend started that may still run (the runner's caller ends them).
  virtual std::vector<pid_t> spawned() const = 0;
};

// A node of the job as it was started: its role and command line (read from /proc).
struct known_node {
  std::string role;
  launch_spec spec;
};

// Signals to local pids; replacements from the removed nodes' command lines (`nodes`, by node
// name, read at the start; a node that came and went unseen is replaced from a sibling of its
// role), their logs in `log_dir`. `why_not` says whether a node's pid may be signalled.
std::unique_ptr<fault_delivery> process_delivery(
    std::map<std::string, known_node> nodes, std::string log_dir,
    std::function<std::string(const node_view&)> why_not);

// `command_line` split on spaces (`scripts/pods.sh fault`); its actions' output in `log_dir`.
// errc::invalid_argument for an empty command.
result<std::unique_ptr<fault_delivery>> command_delivery(const std::string& command_line,
                                                         std::string log_dir);

namespace detail {
// argv with its `node.name=` override set to `name` (appended as `--set node.name=...` when
// the original has none).
std::vector<std::string> with_node_name(std::vector<std::string> argv, const std::string& name);
}  // namespace detail

}  // namespace moerl::sims
