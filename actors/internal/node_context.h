// State one node process shares between its agent and its role actors. It outlives every
// actor incarnation, so what must survive a supervised restart (the shard's buffered
// samples, bound sockets, counters, the ledger events not yet applied) lives here.
// Threading: atomics and the mutex-guarded members are safe from any thread; the role's
// ZeroMQ objects are used by one actor at a time (the current incarnation).
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/node_context.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include "actors/caf_setup.h"
#include "actors/coordinator_trust.h"
#include "actors/internal/monitored_ask.h"
#include "actors/job.h"
#include "actors/node_role.h"
#include "common/config.h"
#include "ledger/reward_hop.h"
#include "ledger/sample_plane.h"
#include "messages/shard.h"
#include "weights/cache_directory.h"
#include "weights/cache_server.h"

namespace moerl::env {
class env_server;          // env/env_server.h
struct env_link_counters;  // env/env_client.h
}  // namespace moerl::env

namespace moerl::actors {

class rank_pool;  // trainer_role.cpp

struct node_context {
  std::string id;    // random 128-bit hex id (node_identity.h)
  std::string name;  // display name
  node_role role = node_role::rollout;
  config cfg;
  control_plane_options cp;
  std::string coord_host;
  uint16_t coord_port = 0;
  std::shared_ptr<zmq::zmq_context> zmq;
  std::string endpoint;              // reward: pull socket; buffer: shard socket
  std::shared_ptr<job> running_job;  // what the role actors run (set before they start)

  // The coordinator's handle; replaced when the coordinator restarts.
  caf::actor coordinator() {
    std::lock_guard<std::mutex> g(mu);
    return coord;
  }
  void set_coordinator(caf::actor a) {
    std::lock_guard<std::mutex> g(mu);
    coord = std::move(a);
  }
  // The actors the role's questions to the coordinator are asked from (call_coordinator, the
  // group all-gathers), kept between questions; closed before the actor system goes.
  monitored_askers coordinator_askers;

  // Drain: 0 while running; else the wall-clock ms by which work must be finished
  // (interruption deadline minus actors.drain_margin_ms).
  std::atomic<int64_t> drain_by_ms{0};
  bool draining() const { return drain_by_ms.load() != 0; }
  std::atomic<bool> stopping{false};  // shutdown: leave loops now

  std::atomic<uint32_t> units_finished{0};  // during drain
  std::atomic<uint32_t> units_returned{0};  // during drain
  std::atomic<uint32_t> active_units{0};
  // An external rollout worker's counters (rollout.worker, python/WORKERS.md) per rollout
  // worker index, as JSON text: the node's stats carry them all.
  std::mutex external_mu;
  std::map<uint32_t, std::string> external_stats;
  std::atomic<uint32_t> workers_running{0};  // role loops alive (drain completion)
  std::atomic<uint32_t> restarts{0};
  std::atomic<uint64_t> policy_version{0};

  // Wakes a rollout worker that found the coordinator's queue empty when a new policy version
  // arrives (the moment the coordinator normally opens the next iteration), instead of it
  // sleeping out its whole retry pause: that pause sat on the iteration's critical path
  // (a 20 ms pause cost the default run ~10 ms per iteration; polling every 2 ms cost CPU).
  void work_may_be_ready() {
    {
      std::lock_guard<std::mutex> g(work_mu);
      ++work_signals;
    }
    work_cv.notify_all();
  }
  // Waits up to wait_ms for work_may_be_ready() after `seen` (a value of work_signal()).
  void wait_for_work(uint64_t seen, int64_t wait_ms) {
    std::unique_lock<std::mutex> g(work_mu);
    work_cv.wait_for(g, std::chrono::milliseconds(wait_ms),
                     [&] { return work_signals != seen || stopping.load(); });
  }
  uint64_t work_signal() {
    std::lock_guard<std::mutex> g(work_mu);
    return work_signals;
  }

  // The weight plane as this node sees it (the caches alive, the version announced); the
  // cache-directory loop keeps it current. Rollout, trainer and weights nodes.
  std::shared_ptr<weights::cache_directory> weight_caches;
  // weights role: the checkpoint cache and its bound server (kept across a loop restart)
  std::unique_ptr<weights::cache_server> weights_server;
  // rollout role with weights.fanout: the server its peers read versions from (its endpoint
  // is the node's), shared with the feed through weight_caches
  std::shared_ptr<weights::peer_server> peer_server;
  // This process's start, first registration and first committed unit (unix ms): what a
  // node that joined mid-run reports as its way to being productive.
  int64_t started_unix_ms = 0;
  std::atomic<int64_t> joined_unix_ms{0};
  std::atomic<int64_t> first_commit_unix_ms{0};

  // Whether the coordinator still counts this node alive (accepted heartbeats); the agent
  // keeps it, the buffer role serves trainers only while it holds.
  coordinator_trust trust;

  // buffer role
  std::unique_ptr<ledger::shard_service> shard;
  std::mutex events_mu;
  std::deque<ledger::ledger_event> events;  // from the coordinator, applied by the shard loop
  // Trainer consumers the coordinator declared lost (name, incarnation bound), under events_mu:
  // the shard loop releases what was handed to them (buffer_shard::consumer_lost).
  std::deque<std::pair<std::string, uint64_t>> lost_consumers;

  // reward role
  std::unique_ptr<ledger::reward_pull> pull;
  std::map<std::string, std::unique_ptr<ledger::sample_producer>> producers;  // by shard endpoint

  // env role: the bound socket (kept across a router restart) and the environment actors,
  // registered by index so the router reaches each one's current incarnation
  std::shared_ptr<env::env_server> env;
  std::mutex env_mu;
  std::map<uint32_t, caf::actor> env_workers;
  // rollout role: what its workers' env links saw (set once, under env_mu)
  std::shared_ptr<env::env_link_counters> env_counters;

  // trainer role: rank actors register here so rank 0 can hand them their share of a batch
  std::mutex ranks_mu;
  std::map<uint32_t, caf::actor> ranks;
  std::atomic<uint64_t> trained_groups{0};  // survives a one_for_all restart of the ranks
  // The ranks as the job's step reaches them, and the step; both survive a one_for_all
  // restart of the ranks (declared in this order: the step refers to the pool).
  std::shared_ptr<rank_pool> trainer_rank_pool;
  std::shared_ptr<trainer_step> trainer_state;
  // The step's incarnation as the buffer shards know this trainer consumer (ledger/LEDGER.md,
  // "Handed to a trainer"), set when the step is made, and the batches handed to the step
  // that no policy version includes yet, by shard endpoint. Like the step, they survive a
  // restart of the ranks: the step still holds those groups. Rank 0's thread only.
  uint64_t trainer_incarnation = 0;
  std::map<std::string, std::vector<uint64_t>> unconfirmed_batches;
  // Groups the ledger granted this incarnation's claims (actors/internal/trainer_claim.h): those no
  // policy version has yet, and those a version has that the ledger has not been told of
  // (sent with the next claim). Told before a new incarnation starts, so a restart of the
  // ranks does not leave trained groups to be re-opened.
  std::vector<messages::handed_group> claimed_untrained;
  std::vector<messages::handed_group> claimed_trained;

 private:
  std::mutex mu;
  caf::actor coord;
  std::mutex work_mu;  // work_may_be_ready / wait_for_work
  std::condition_variable work_cv;
  uint64_t work_signals = 0;
};

}  // namespace moerl::actors
