// Work units, leases and reports (schema: messages/work.capnp; semantics: ledger/LEDGER.md).
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
  uint32_t attempt = 0;         // fencing token
  std::string worker;
  uint64_t deadline_unix_ms = 0;
  uint64_t policy_version = 0;
  std::string shard;            // buffer shard that must receive every sample (its name)
  std::string shard_endpoint;   // ZeroMQ endpoint of that shard's sample socket
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

MOERL_MESSAGE_KIND(work_unit, kind::work_unit);
MOERL_MESSAGE_KIND(lease, kind::lease);
MOERL_MESSAGE_KIND(lease_request, kind::lease_request);
MOERL_MESSAGE_KIND(unit_report, kind::unit_report);

}  // namespace moerl::messages
