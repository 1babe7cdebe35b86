// A rollout worker's env_link (env/env_api.h) over the env nodes' ROUTER sockets
// (env/ENV.md). It finds the live env nodes through the coordinator, opens each new
// session on the node with the fewest open sessions (as the nodes last reported, plus what
// it opened since), keeps every later step of that episode on the same node, and bounds
// every request by env.step_timeout_ms: a node that does not answer in time fails the
// episodes waiting on it and takes no new sessions for a while. Used by one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "env/env_api.h"
#include "zmq/context.h"

namespace moerl::env {

// What a rollout node's env links have seen, summed over its workers (sent in its stats).
struct env_link_counters {
  std::mutex mu;
  uint64_t num_steps = 0;
  uint64_t num_episodes = 0;
  std::map<std::string, uint64_t> episodes_failed;  // reason -> count
};

// The report's `env` block: the trainer's figures (`trainer_env`: steps, latency, turns)
// plus `episodes_failed` {reason: n} summed over the rollout nodes in the coordinator's node
// view (their stats' `env`; a replaced node's last stats included).
nlohmann::json env_report(const nlohmann::json& trainer_env, const nlohmann::json& nodes);

// What an env link needs from the node that runs it.
struct env_client_options {
  std::shared_ptr<zmq::zmq_context> zmq;
  int64_t step_timeout_ms = 0;  // env.step_timeout_ms
  // The endpoints of the live env nodes (the coordinator's discovery); an error keeps the
  // nodes known so far (a coordinator restarting).
  std::function<result<std::vector<std::string>>()> discover_env_nodes;
  const std::atomic<bool>* stopping = nullptr;  // the node is shutting down: stop waiting
};

std::unique_ptr<env_link> make_env_client(env_client_options options,
                                          std::shared_ptr<env_link_counters> counters);

}  // namespace moerl::env
