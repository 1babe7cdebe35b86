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

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/ledger/work_ledger.h"
#include "common/error.h"
#include "messages/admin.h"
#include "messages/control.h"
#include "messages/work.h"

namespace moerl::actors {

struct coordinator_options {
  uint32_t iterations = 3;
  uint32_t units_per_iteration = 8;
  uint32_t groups_per_unit = 2;
  int64_t heartbeat_timeout_ms = 1500;  // node.heartbeat_interval_ms x actors.heartbeat_misses
  int64_t default_notice_ms = 30000;    // deadline of a console drain/inject without --deadline
  int64_t rebalance_grace_ms = 120000;  // `inject rebalance` without --deadline (imds.rebalance_grace_ms)
  std::string console_token;
  std::string task = "modpow";

  static result<coordinator_options> from_config(const config& cfg);
};

struct node_record {
  std::string id;        // moerl's random 128-bit node id (hex)
  std::string name;
  std::string role;
  std::string endpoint;  // buffer shards: sample-plane endpoint
  std::string state;     // running | draining | drained | dead
  std::string down_reason;
  uint32_t pid = 0;
  uint32_t restarts = 0;
  uint32_t leases = 0;   // leases held (ledger view for rollouts)
  int64_t last_seen_ms = 0;
  nlohmann::json stats;  // last stats the node sent (buffer fill, trainer checks)
};

// Something the actor must send to a node (looked up by node id).
struct outbound {
  enum class kind { shard_event, policy_version, notice, signal, shutdown };
  kind what = kind::shard_event;
  std::string node;
  ledger::ledger_event event;          // shard_event
  uint64_t version = 0;                // policy_version
  messages::interruption_notice notice;  // notice
  int signal = 0;                      // signal (SIGTERM, SIGKILL)
};

class coordinator_core {
 public:
  coordinator_core(coordinator_options opts, std::unique_ptr<ledger::work_ledger> ledger,
                   const ledger::clock& clock);

  // ---- membership -------------------------------------------------------------------
  // A node joins (or re-joins after a coordinator restart) with a heartbeat message.
  status register_node(const messages::heartbeat& hb);
  status heartbeat(const messages::heartbeat& hb);
  // The node's process is gone (CAF down message or heartbeat timeout). Expires its
  // leases; a buffer shard's unconsumed samples are re-opened (ledger shard_lost). Never
  // touches other nodes: a vanished rollout node does not restart the trainer group.
  // `fence`: the process may still be running (heartbeat silence): tell it to die.
  void node_down(const std::string& node, const std::string& reason, bool fence = false);
  // The node finished its drain: records the interruption, marks it drained.
  void drained(const std::string& node, const nlohmann::json& record);
  void node_stats(const std::string& node, const nlohmann::json& stats);

  // ---- work -------------------------------------------------------------------------
  // Encoded lease on success, else an encoded moerl::error (not_found: nothing pending;
  // shutting_down: the node drains; unknown_node).
  std::string lease(const messages::lease_request& req);
  // finished -> ledger.report; returned/failed -> ledger.give_back. Encoded error or "".
  std::string report(const messages::unit_report& rep);
  status shard_ack(const ledger::shard_ack& ack);
  status consumed(const ledger::consumption& c);
  // The trainer published a new policy version (after an iteration's worth of groups).
  void policy_version(uint64_t v, const std::string& manifest_bytes);

  // Periodic: lease expiry, heartbeat timeouts, next iteration's units, durability, the
  // invariant check. Call every ~100 ms.
  void tick();

  // ---- admin ------------------------------------------------------------------------
  messages::admin_reply admin(const messages::admin_request& req);
  nlohmann::json status_json() const;
  nlohmann::json nodes_json() const;
  nlohmann::json report_json() const;
  bool done() const;              // every iteration's units committed or dropped, all trained
  bool shutdown_requested() const { return shutdown_; }

  std::vector<outbound> take_outbound();
  const std::map<std::string, node_record>& nodes() const { return nodes_; }
  ledger::work_ledger& ledger() { return *ledger_; }
  uint64_t current_policy_version() const { return policy_version_; }

 private:
  const node_record* resolve(const std::string& who) const;  // id, id prefix or name
  void flush_ledger();   // sync + route events to shards
  void open_iteration();
  void record_invariant();
  std::string owner_of_worker(const std::string& worker) const;

  coordinator_options opts_;
  std::unique_ptr<ledger::work_ledger> ledger_;
  const ledger::clock& clock_;
  std::map<std::string, node_record> nodes_;
  std::map<std::string, std::string> shard_node_;  // shard name -> node id
  std::map<std::string, std::vector<ledger::ledger_event>> undelivered_;  // shard name -> events
  std::vector<outbound> out_;
  uint32_t iterations_opened_ = 0;
  uint64_t next_group_ = 1;
  uint64_t policy_version_ = 0;
  std::string last_manifest_;
  nlohmann::json interruptions_ = nlohmann::json::array();
  std::map<std::string, nlohmann::json> pending_notices_;  // node -> notice record
  uint64_t invariant_violations_ = 0;
  std::string last_violation_;
  bool shutdown_ = false;
  int64_t started_ms_ = 0;
  bool recovery_checked_ = false;  // shards of a previous incarnation that did not re-join
};

// Encodes a moerl::error as the reply bytes of a failed request (messages kind::error).
std::string encode_error(errc code, const std::string& message);

}  // namespace moerl::actors
