// What the coordinator and a buffer shard tell each other about the ledger (schema:
// messages/shard.capnp): the events one ledger flush released for the shard, and the shard's
// acknowledgement of an attempt's groups. These mirror moerl::ledger's ledger_event and
// shard_ack; messages/ does not depend on the ledger, so actors/ converts at the edge.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/codec.h"

namespace moerl::messages {

enum class ledger_event_kind : uint8_t {
  attempt_opened = 0,  // expect groups x group_size samples of (unit, attempt)
  attempt_fenced = 1,  // purge staged samples of (unit, attempt) and refuse later ones
  unit_committed = 2,  // staged samples of (unit, attempt) become servable
};

struct ledger_event {
  ledger_event_kind what = ledger_event_kind::attempt_opened;
  uint64_t unit = 0;
  uint32_t attempt = 0;
  uint32_t group_size = 0;       // attempt_opened only
  std::vector<uint64_t> groups;  // attempt_opened only
};

// Every event one ledger flush released for one shard, in order; the receiver is the shard.
struct ledger_events {
  std::vector<ledger_event> events;
};

struct shard_ack {
  uint64_t unit = 0;
  uint32_t attempt = 0;
  std::string shard;
  std::vector<uint64_t> accepted_groups;  // admitted whole; servable once the unit commits
  std::vector<uint64_t> stale_groups;     // a sample was older than max_staleness: dropped
};

// One group as a shard handed it to a trainer.
struct handed_group {
  uint64_t unit = 0;
  uint32_t attempt = 0;
  uint64_t group = 0;
  uint64_t handout = 0;
};

// A trainer's claim before it trains (ledger/LEDGER.md, "Claimed before trained").
struct trainer_claim {
  std::string consumer;
  uint64_t incarnation = 0;
  std::vector<handed_group> claims;     // about to be trained
  std::vector<handed_group> confirmed;  // in a policy version the trainer made
};

struct trainer_claim_reply {
  std::vector<bool> granted;  // per claim, in order
};

// One step of a group a shard handed to a trainer (ledger::consumption on the wire).
struct consumption_step {
  uint64_t unit = 0;
  uint32_t attempt = 0;
  uint64_t group = 0;
  uint32_t num_samples = 0;
  uint64_t handout = 0;
  uint8_t step = 0;  // ledger::handout_step; checked by the ledger's side of the edge
};

// Everything one pass of a shard's loop has for the ledger, sent in one call.
struct shard_reports {
  std::vector<shard_ack> acks;
  std::vector<consumption_step> consumed;
};

// Per item of a shard_reports, acks first: "" recorded, else why it was refused.
struct shard_reports_reply {
  std::vector<std::string> errors;
};

MOERL_MESSAGE_KIND(ledger_events, kind::ledger_events);
MOERL_MESSAGE_KIND(trainer_claim, kind::trainer_claim);
MOERL_MESSAGE_KIND(trainer_claim_reply, kind::trainer_claim_reply);
MOERL_MESSAGE_KIND(shard_ack, kind::shard_ack);
MOERL_MESSAGE_KIND(shard_reports, kind::shard_reports);
MOERL_MESSAGE_KIND(shard_reports_reply, kind::shard_reports_reply);

}  // namespace moerl::messages
