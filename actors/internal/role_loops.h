// Private to the role files (node_roles.cpp, rollout_role.cpp, trainer_role.cpp,
// service_roles.cpp): the loop each role's actors run, and what those loops share. Every
// loop is the body of one blocking actor (node_roles.h says which role runs which).
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/role_loops.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "actors/internal/node_context.h"
#include "actors/node_role.h"
#include "common/error.h"

namespace moerl::actors {

void rollout_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx,
                  uint32_t worker_index);
void reward_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx);
void shard_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx);
// The env role (env_role.cpp): the router owning the node's socket, and the environment
// actors it hands sessions to.
void env_router_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx);
void env_worker_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx, uint32_t index);
void weights_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx);
// Keeps ctx->weight_caches current: the caches alive (the coordinator's `nodes`, each second)
// and the newest version announced. Rollout, trainer and weights nodes.
void cache_directory_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx);
// When this process started, first registered and first had a unit committed (unix ms; 0:
// not yet), for the report's replacements.
nlohmann::json node_timeline(const node_context& ctx);
// Connections this node's ZeroMQ server sockets shut down because their peer address held
// node.zmq_max_connections_per_peer already (the stats' zmq_refused_connections).
uint64_t zmq_refused_connections(const node_context& ctx);
// Rank 0 of the trainer group: pulls batches from every shard and runs the job's step.
void trainer_driver_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx,
                         uint32_t num_ranks);
// Ranks 1..: run the work the step spreads over the ranks (trainer_ranks in job.h).
void trainer_rank_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx, uint32_t rank);

// ---- shared by the loops ------------------------------------------------------------------

int64_t steady_ms();

// Microseconds since `t0`, saturated to the sample message's 32-bit timing fields.
uint32_t micros_since(std::chrono::steady_clock::time_point t0);

// Counts a role loop as alive for the agent's drain completion check.
struct running_guard {
  std::atomic<uint32_t>& n;
  explicit running_guard(std::atomic<uint32_t>& c) : n(c) { ++n; }
  ~running_guard() { --n; }
  running_guard(const running_guard&) = delete;
  running_guard& operator=(const running_guard&) = delete;
};

// Handles what is in the mailbox (waiting up to `wait_ms` for something); false when the
// loop must end (shutdown_atom or the node is stopping).
bool mailbox_ok(caf::blocking_actor* self, node_context& ctx, int64_t wait_ms);

// One request to the coordinator with the configured timeout. "" or payload bytes on
// success; a reply that is an encoded moerl::error becomes that error.
result<std::string> call_coordinator(caf::blocking_actor* self, node_context& ctx,
                                     caf::message request);
// A coordinator reply as call_coordinator returns it: an encoded moerl::error becomes that
// error (for callers that take the answer of a request later).
result<std::string> coordinator_reply(std::string raw);

// Live nodes of a role with their endpoints, from the coordinator's admin `nodes` view. An
// error when the coordinator did not answer (it may be restarting): callers must not read
// "no answer" as "no such node", or a coordinator restart makes every shard look gone.
result<std::vector<std::string>> discover(caf::blocking_actor* self, node_context& ctx,
                                          node_role role);

// True only when the coordinator answered and `endpoint` is not among the live nodes of
// `role`.
bool known_gone(caf::blocking_actor* self, node_context& ctx, node_role role,
                const std::string& endpoint);

// Fails the calling actor with `why` (its supervisor decides whether it restarts).
void fail_actor(caf::blocking_actor* self, const std::string& why);

}  // namespace moerl::actors
