// A whole cluster on this machine, one process per node on loopback: what `moerl up` runs and
// what the multi-process tests drive. Children are `moerl node` processes of the same binary
// (fork + exec), each logging to <log_dir>/<name>.log. The cluster talks to its coordinator
// only through the console (ZeroMQ admin plane), like an operator would.
// Not thread-safe. The destructor SIGKILLs and reaps whatever is still running.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "zmq/plane_keys.h"

namespace moerl::up {

struct node_spec {
  std::string role;
  std::string name;
  std::vector<std::string> overrides;  // key=value for this node only
};

struct cluster_options {
  std::string binary;                  // the moerl executable
  std::string config_file;             // passed to every node ("" for none)
  std::vector<std::string> overrides;  // passed to every node
  // console.address. "" keeps the config's, or a free port on 127.0.0.1 when that is the
  // default and another job holds it; an address given here or in the config that another
  // process holds is an error (the run's console is its own).
  std::string console;
  std::string log_dir;
  std::vector<node_spec> nodes;  // not counting the coordinator (always first)
  int64_t start_timeout_ms = 20000;
};

// The default cluster of `moerl up`: 2 buffer shards, weights, trainer, reward, 2 rollouts.
// trainer_members > 1: that many trainer nodes (trainer-0..), one trainer group across them.
std::vector<node_spec> default_cluster_nodes(uint32_t trainer_members = 1);

// Picks a free TCP port on 127.0.0.1 (bind to 0, read it, close).
result<uint16_t> free_tcp_port();

// Whether a listener could bind tcp://HOST:PORT now (HOST numeric IPv4 or "*"); true for
// addresses it cannot check (other transports, host names).
bool console_address_free(const std::string& zmq_address);

class local_cluster {
 public:
  // Starts the coordinator, waits for its console (an error with the coordinator's exit
  // status and log tail when it exits first), then every node.
  static result<std::unique_ptr<local_cluster>> start(cluster_options opts);
  ~local_cluster();

  // One console command; the reply's body as JSON, or its error.
  result<nlohmann::json> console(
      const std::string& command, const std::vector<std::string>& args = {},
      const std::vector<std::pair<std::string, std::string>>& options = {}, int timeout_ms = 5000);
  // Waits until `pred(status)` holds (polling status every 100 ms) or the timeout passes.
  result<nlohmann::json> wait_status(const std::function<bool(const nlohmann::json&)>& pred,
                                     int64_t timeout_ms);

  // Starts one more node (its name must be new) once the cluster is up. `exec_prefix` goes
  // before its command line, e.g. {"ip", "netns", "exec", "ns"} to start it inside a network
  // namespace; a restart keeps it.
  status add_node(const node_spec& spec, const std::vector<std::string>& exec_prefix = {});

  pid_t pid_of(const std::string& name) const;
  status signal(const std::string& name, int sig);
  // Waits for the node's process to exit; its wait status (-1 on timeout).
  int wait_exit(const std::string& name, int64_t timeout_ms);
  // Starts the node again from its spec (same name and overrides): a coordinator restart.
  status restart(const std::string& name);
  // Starts `new_name` from the spec of `name`, which exited (a new pod of its Deployment);
  // `name` is forgotten.
  status replace(const std::string& name, const std::string& new_name);
  // The node's role ("" for a name never started).
  std::string role_of(const std::string& name) const;
  // The last `num_lines` lines of the node's log, for a diagnosis.
  std::string log_tail(const std::string& name, size_t num_lines) const;
  // Console shutdown, then waits up to timeout for every child; SIGKILLs the rest.
  status stop(int64_t timeout_ms);
  // Names whose processes exited, with their wait status.
  std::map<std::string, int> exited();

  const std::string& console_address() const { return console_; }
  // HOST:PORT of the coordinator's HTTP console ("" when console.http_address is off).
  const std::string& http_address() const { return http_; }
  const std::string& coordinator_join() const { return join_; }
  std::string token() const { return token_; }

 private:
  local_cluster() = default;
  status spawn(const node_spec& spec);
  // Waits for the coordinator's console to answer; an error when the coordinator exits first.
  status wait_coordinator_up();
  void reap();

  cluster_options opts_;
  std::string console_, join_, token_, http_;
  std::optional<zmq::plane_keys> admin_keys_;  // the console's, when it is off loopback
  // Whether this run chose its console addresses itself (the built-in default, or a free port
  // instead of a taken default): those may move when taken; a user's may not.
  bool console_chosen_ = false, http_chosen_ = false;
  std::map<std::string, node_spec> specs_;
  std::map<std::string, std::vector<std::string>> exec_prefixes_;  // nodes that have one
  std::map<std::string, pid_t> pids_;
  std::map<std::string, int> exited_;
  uint64_t next_request_ = 1;
};

}  // namespace moerl::up
