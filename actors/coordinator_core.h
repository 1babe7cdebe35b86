// The coordinator's logic without CAF: node membership, the ledger (moerl_ledger) behind the
// lease/report/ack/consumed protocol, iteration scheduling, failure handling, interruption
// records, admin commands and the run report. The CAF actor (coordinator.cpp) only moves
// bytes between this class and the network and delivers its outbound messages; so every
// decision here is testable deterministically (inject a call, check the result).
//
// Threading: not thread-safe; owned by the coordinator actor.
// Time: `clock` is the ledger's (monotonic ms); wall-clock only for values shown to people
// and deadlines sent to nodes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/coordinator_trust.h"
#include "actors/node_group_core.h"
#include "actors/node_role.h"
#include "common/error.h"
#include "ledger/work_ledger.h"
#include "messages/admin.h"
#include "messages/control.h"
#include "messages/shard.h"
#include "messages/work.h"

namespace moerl::actors {

struct coordinator_options {
  uint32_t iterations = 3;
  uint32_t units_per_iteration = 8;
  uint32_t groups_per_unit = 2;
  int64_t heartbeat_timeout_ms = 1500;    // node.heartbeat_interval_ms x actors.heartbeat_misses
  int64_t default_notice_ms = 30000;      // deadline of a console drain/inject without --deadline
  int64_t group_form_timeout_ms = 30000;  // trainer.group_form_timeout_ms
  int64_t rebalance_grace_ms =
      120000;  // `inject rebalance` without --deadline (imds.rebalance_grace_ms)
  std::string console_token;
  std::string task = "modpow";
  uint32_t lease_batch = 1;  // actors.lease_batch: most leases one batched request gets

  static result<coordinator_options> from_config(const config& cfg);
};

struct node_record {
  std::string id;  // moerl's random 128-bit node id (hex)
  std::string name;
  node_role role = node_role::rollout;
  std::string endpoint;  // buffer shards: sample-plane endpoint
  std::string state;     // running | draining | drained | dead
  std::string down_reason;
  std::string gave_up;  // why the node gave up, when it did (coordinator_core::gave_up)
  uint32_t pid = 0;
  uint32_t restarts = 0;
  uint32_t leases = 0;  // leases held (ledger view for rollouts)
  int64_t last_seen_ms = 0;
  // Heartbeats as the coordinator saw them (nodes_json "heartbeat"): how close the node came
  // to being declared dead, and where a late heartbeat spent its time.
  uint64_t heartbeats = 0;
  int64_t max_silence_ms = 0;  // longest silence counted against it (what the timeout judges)
  int64_t max_delay_ms = 0;    // longest from its send to the coordinator handling it (one host)
  nlohmann::json stats;        // last stats the node sent (buffer fill, trainer checks)
};

// Something the actor must send to a node (looked up by node id).
struct outbound {
  enum class kind { shard_event, policy_version, notice, signal, shutdown, consumer_lost };
  kind what = kind::shard_event;
  std::string node;
  ledger::ledger_event event;            // shard_event
  uint64_t version = 0;                  // policy_version
  messages::interruption_notice notice;  // notice
  int signal = 0;                        // signal (SIGTERM, SIGKILL)
  // consumer_lost (to buffer shards): every incarnation of trainer consumer `consumer` up to
  // `version` (a wall-clock µs bound, as trainer incarnations are) is lost.
  std::string consumer = "";  // (an initializer: the older brace-inits need not name it)
};

class coordinator_core {
 public:
  coordinator_core(coordinator_options opts, std::unique_ptr<ledger::work_ledger> ledger,
                   const ledger::clock& clock);

  // ---- membership -------------------------------------------------------------------
  // A node joins (or re-joins after a coordinator restart) with a heartbeat message. A node
  // this coordinator declared dead stays dead: its re-join and heartbeats are refused with
  // peer_dead, "... fenced" (its groups were re-opened; it must exit and come back as a new
  // process).
  // A heartbeat is accepted (ok) only from a running or draining node: that answer is what
  // lets a buffer shard keep serving (coordinator_trust.h).
  status register_node(const messages::heartbeat& hb);
  status heartbeat(const messages::heartbeat& hb);
  // The node's process is gone (CAF down message or heartbeat timeout). Expires its
  // leases; a buffer shard's unconsumed samples are re-opened (ledger shard_lost). Never
  // touches other nodes: a vanished rollout node does not restart the trainer group.
  // `fence`: the process may still be running (heartbeat silence): tell it to die.
  // A trainer's consumer is declared lost to every shard: the groups handed to it go back
  // (served again, or dropped stale) even if no successor ever asks.
  void node_down(const std::string& node, const std::string& reason, bool fence = false);
  // The node's CAF link dropped (a monitor's down message). That is also what a blip looks
  // like (a stalled middleman, a TLS handshake storm): the node is `unreachable` and has
  // kRejoinGraceMs to re-join before tick() declares it down. Nodes re-join within tens of
  // ms after a blip, so a live shard is not written off and re-opened behind its back.
  void link_lost(const std::string& node, const std::string& reason);
  static constexpr int64_t kRejoinGraceMs = actors::kRejoinGraceMs;  // coordinator_trust.h
  // The node finished its drain: records the interruption, marks it drained.
  void drained(const std::string& node, const nlohmann::json& record);
  void node_stats(const std::string& node, const nlohmann::json& stats);
  // The node gave up (its supervisor reached actors.restart_intensity) and exits next:
  // `cause` stays with its record (nodes_json's "gave_up"), so whoever supervises the job
  // can say why it failed.
  void gave_up(const std::string& node, const std::string& cause);

  // ---- work -------------------------------------------------------------------------
  // Results are values; the actor (coordinator.cpp) encodes them for the wire.
  // A lease, or why not (not_found: nothing pending; capacity_exceeded: the shard is full or
  // has not joined; shutting_down: the node drains or the run ends; unknown_node).
  result<messages::lease> lease(const messages::lease_request& req);
  // Batched leasing: up to min(req.max_units, actors.lease_batch) leases in one reply; an
  // error when not even one unit could be leased. Each lease is what lease() would give:
  // own attempt, deadline, shard.
  result<messages::lease_batch> lease_batch(const messages::lease_request& req);
  // The worker gives back leases it has not started (drain, stop): each goes through
  // ledger.give_back (pending again, attempt fenced). The first refusal, if any (the
  // others still apply).
  status give_back(const messages::lease_give_back& back);
  // finished -> ledger.report; returned/failed -> ledger.give_back.
  status report(const messages::unit_report& rep);
  status shard_ack(const ledger::shard_ack& ack);
  status consumed(const ledger::consumption& c);
  // A trainer's claim before its step uses a batch (ledger/LEDGER.md, "Claimed before
  // trained"): first the groups it confirms (trained, also of a shard that is gone), then,
  // per claimed group, whether it may train it.
  result<messages::trainer_claim_reply> trainer_claim(const messages::trainer_claim& c);
  // The trainer published a new policy version (after an iteration's worth of groups).
  void policy_version(uint64_t v, const std::string& manifest_bytes);

  // Periodic: lease expiry, heartbeat timeouts, next iteration's units, durability, the
  // invariant check. Call every ~100 ms.
  void tick();
  // The coordinator itself did not run for `ms` (its tick came that much late: a journal
  // sync stalled on a busy disk, CPU starvation). The heartbeats that arrived meanwhile wait
  // in its mailbox behind the tick, so its own stall is not held against the nodes: their
  // silence clocks move on by `ms` (a declaration only comes later, never earlier, so a
  // shard's trust rule still holds: coordinator_trust.h).
  void stalled(int64_t ms);

  // ---- admin ------------------------------------------------------------------------
  messages::admin_reply admin(const messages::admin_request& req);
  nlohmann::json status_json() const;
  // Every node with its stats; `history_tail` keeps only the newest entries of the job
  // stats' per-iteration lists (job_history.h), which are most of a trainer's stats late in a
  // run and which a poller that shows progress does not need whole.
  nlohmann::json nodes_json(std::optional<size_t> history_tail = std::nullopt) const;
  nlohmann::json report_json() const;
  // The report's `expert_planes`: [{node, group, provider, peer_paths}] for every node whose
  // job runs expert-parallel ranks, as its last stats named the transport each peer pair
  // actually uses ("same_process", "same_host", "network"): no fallback goes unreported.
  nlohmann::json expert_planes_json() const;
  bool done() const;  // every iteration's units committed or dropped, all trained
  bool shutdown_requested() const { return shutdown_; }

  std::vector<outbound> take_outbound();

  // ---- group commit (LEDGER.md: one sync for every waiting request) --------------------
  // On: calls that change the ledger no longer sync it themselves; the owner handles every
  // waiting request, calls flush() once and replies to all of them only after flush()
  // returned true. Off (the default): every call syncs before it returns.
  void set_group_commit(bool on) { group_commit_ = on; }
  // Syncs the ledger and routes the now-durable events to take_outbound(). False when the
  // store failed: the tail is kept, nothing may be answered yet, a later flush() retries.
  bool flush();
  // flush() in halves, for an owner that writes the journal off its own thread (the
  // coordinator actor, ledger_writer.h): begin_flush() takes the ledger's tail as a batch for
  // work_ledger::write_sync on `ledger_store()`; end_flush() applies the written outcome and,
  // when the records are durable, routes their events (flush()'s result). Calls that change
  // the ledger may run between the halves; their records wait for the next batch.
  result<ledger::work_ledger::sync_batch> begin_flush();
  bool end_flush(ledger::work_ledger::sync_batch batch, const status& written);
  store::object_store* ledger_store() const { return ledger_->store(); }
  bool flush_due() const { return flush_due_; }
  const std::map<std::string, node_record>& nodes() const { return nodes_; }
  ledger::work_ledger& ledger() { return *ledger_; }
  // Groups that span nodes (node_group_core.h); a node's loss breaks its group.
  node_group_core& groups() { return groups_; }
  const node_group_core& groups() const { return groups_; }
  // Where the groups' history goes whenever it changed (the store next to the ledger,
  // node_runtime.cpp), so a restarted coordinator continues it (node_group_core.h).
  void set_group_history_sink(std::function<status(const nlohmann::json&)> sink) {
    group_history_sink_ = std::move(sink);
  }
  // Hands the history to the sink if it changed since the last save: after a join (before the
  // member can see a new incarnation) and on every tick (breaks, restored versions).
  void save_group_history();
  int64_t now_ms() const { return clock_.now_ms(); }
  const ledger::work_ledger& ledger() const { return *ledger_; }
  // Every interruption recorded so far (the report's and the console's interruption log).
  const nlohmann::json& interruptions() const { return interruptions_; }
  uint64_t current_policy_version() const { return policy_version_; }
  // The coordinator actor counts every message it handles by kind (its atom's name; "flush"
  // is a group commit: one journal sync): the control plane's load per kind, since this
  // process started, in the status view's control_plane.messages, the run report's
  // coordinator_messages and Prometheus' moerl_coordinator_messages_total.
  void count_message(const char* kind) { ++messages_[kind]; }

 private:
  const node_record* resolve(const std::string& who) const;  // id, id prefix or name
  // Why `worker`'s node may not lease now (unknown, dead, draining, run shutting down); else
  // nullopt and *node is its record.
  std::optional<error> refuse_lease(const std::string& worker, node_record** node);
  // The lease as a worker receives it; nullopt (and the unit handed back) when its shard
  // has not joined this coordinator. `unix_minus_clock`: wall clock minus ledger clock.
  std::optional<messages::lease> to_wire(const ledger::lease& l, int64_t unix_minus_clock);
  void flush_ledger();  // sync + route events to shards (deferred to flush() under group commit)
  bool sync_and_route();
  // After a sync: routes the events it made durable to take_outbound() (false: it failed).
  bool route_durable(const status& synced);
  void open_iteration();
  bool maybe_open_iteration();  // true when it opened one
  void record_invariant();
  std::string owner_of_worker(const std::string& worker) const;

  coordinator_options opts_;
  std::map<std::string, uint64_t> messages_;  // count_message
  std::unique_ptr<ledger::work_ledger> ledger_;
  const ledger::clock& clock_;
  std::map<std::string, node_record> nodes_;
  std::map<std::string, std::string> shard_node_;                         // shard name -> node id
  std::map<std::string, std::vector<ledger::ledger_event>> undelivered_;  // shard name -> events
  std::vector<outbound> out_;
  uint32_t iterations_opened_ = 0;
  uint64_t next_group_ = 1;
  uint64_t policy_version_ = 0;
  std::string last_manifest_;
  nlohmann::json interruptions_ = nlohmann::json::array();
  std::map<std::string, nlohmann::json> pending_notices_;  // node -> notice record
  // Trainer consumers declared lost: name -> incarnation bound (LEDGER.md, "Handed to a
  // trainer"); sent to every buffer shard, and again to one that (re-)joins.
  std::map<std::string, uint64_t> lost_consumers_;
  void consumer_lost(const node_record& trainer);
  uint64_t invariant_violations_ = 0;
  std::string last_violation_;
  // record_invariant's pacing and its last answer (status reads it instead of recomputing).
  std::chrono::steady_clock::time_point invariant_checked_at_{};
  std::chrono::steady_clock::duration invariant_check_cost_{};
  bool invariant_ok_ = true;
  bool shutdown_ = false;
  std::function<status(const nlohmann::json&)> group_history_sink_;
  uint64_t group_history_saved_ = 0;  // node_group_core::history_version() last saved
  int64_t started_ms_ = 0;
  bool recovery_checked_ = false;  // shards of a previous incarnation that did not re-join
  node_group_core groups_;
  bool group_commit_ = false;
  bool flush_due_ = false;  // group commit: the ledger changed since the last flush()
};

// Encodes a moerl::error as the reply bytes of a failed request (messages kind::error).
std::string encode_error(errc code, const std::string& message);

}  // namespace moerl::actors
