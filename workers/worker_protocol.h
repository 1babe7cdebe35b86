// The local worker protocol's messages (workers/PROTOCOL.md), as the node checks them. Every
// message is a JSON object {"v": kProtocolVersion, "type": NAME, ...}; the node refuses
// anything else with one of the named reasons below, tells the worker (an "error" frame)
// and keeps serving.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace moerl::workers {

constexpr int kProtocolVersion = 1;

// Why a worker's message was refused; the name travels in the "error" frame and in the
// node's counters. One line each:
enum class refusal {
  malformed,            // not a JSON object, a field missing or of the wrong type/range
  bad_version,          // "v" is not kProtocolVersion
  unknown_type,         // "type" is not one this role accepts now
  stale_fencing_token,  // a sample's attempt is not the lease's current one (fenced off)
  unknown_unit,         // a sample for a unit this worker does not hold a lease on
  duplicate,            // a sample for a (group, index) already submitted under this lease
  wrong_id,             // a reply to a request that is not the one outstanding
  not_rank_zero,        // a rollout group's rank > 0 submitted or ended a lease (rank 0 does)
};
const char* refusal_name(refusal r);

// A checked message: its type, or the refusal and what exactly was wrong.
struct checked {
  bool ok = false;
  std::string type;
  refusal why = refusal::malformed;
  std::string detail;
};
// Checks "v" and that "type" is one of `accepted`.
checked check_envelope(const nlohmann::json& msg, std::initializer_list<const char*> accepted);

// Field readers: false (and `detail` names the field and expectation) when absent or wrong.
bool read_u64(const nlohmann::json& msg, const char* field, uint64_t& out, std::string& detail);
bool read_finite(const nlohmann::json& msg, const char* field, double& out, std::string& detail);
bool read_u32_list(const nlohmann::json& msg, const char* field, std::vector<uint32_t>& out,
                   std::string& detail);
bool read_float_list(const nlohmann::json& msg, const char* field, std::vector<float>& out,
                     std::string& detail);

// The frame the node sends when it refuses a message: {"type":"error","reason","detail"}.
nlohmann::json error_frame(refusal why, const std::string& detail);

}  // namespace moerl::workers
