// Work units, leases, lease batches, give-backs, prompts and reports (schema:
// messages/work.capnp; semantics: ledger/LEDGER.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/codec.h"

namespace moerl::messages {

struct work_unit {
  uint64_t id = 0;
  std::vector<uint64_t> group_ids;
  uint32_t samples_per_group = 0;
  uint64_t task_seed = 0;
  std::string task;
};

struct lease {
  work_unit unit;
  uint32_t attempt = 0;  // fencing token
  std::string worker;
  uint64_t deadline_unix_ms = 0;
  uint64_t policy_version = 0;
  std::string shard;           // buffer shard that must receive every sample (its name)
  std::string shard_endpoint;  // ZeroMQ endpoint of that shard's sample socket
};

struct lease_request {
  std::string worker;
  uint32_t max_units = 1;
  uint64_t policy_version = 0;
};

enum class unit_status : uint8_t { finished = 0, returned = 1, failed = 2 };

struct unit_report {
  uint64_t unit_id = 0;
  uint32_t attempt = 0;
  std::string worker;
  unit_status status = unit_status::finished;
  uint32_t samples_produced = 0;
  std::string reason;
};

// The reply to a batched lease request (schema LeaseBatch). Every lease of one batch has the
// same worker, policy_version, unit.task and unit.samples_per_group (the encoder states them
// once, from the first lease); decoding hands each lease back complete, unit.task_seed 0.
struct lease_batch {
  std::vector<lease> leases;
};

// Leases a worker fetched but never started, handed back in one message (LeaseGiveBack).
struct lease_give_back {
  struct lease_id {
    uint64_t unit = 0;
    uint32_t attempt = 0;
  };
  std::string worker;
  std::vector<lease_id> leases;
};

// The prompt of one prompt group, as the env role serves it (schema Prompt).
struct prompt {
  uint64_t group_id = 0;
  std::vector<uint32_t> tokens;
};

MOERL_MESSAGE_KIND(work_unit, kind::work_unit);
MOERL_MESSAGE_KIND(lease, kind::lease);
MOERL_MESSAGE_KIND(lease_request, kind::lease_request);
MOERL_MESSAGE_KIND(unit_report, kind::unit_report);
MOERL_MESSAGE_KIND(lease_batch, kind::lease_batch);
MOERL_MESSAGE_KIND(lease_give_back, kind::lease_give_back);
MOERL_MESSAGE_KIND(prompt, kind::prompt);

}  // namespace moerl::messages
