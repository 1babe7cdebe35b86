// Heartbeats and interruption notices (schema: messages/control.capnp).
#pragma once

#include <cstdint>
#include <string>

#include "messages/codec.h"

namespace moerl::messages {

struct heartbeat {
  std::string node;
  std::string role;
  uint32_t pid = 0;
  uint64_t seq = 0;
  uint64_t sent_unix_ms = 0;
  std::string state;
  uint32_t leases = 0;
  uint32_t restarts = 0;  // actor restarts made by this node's supervisor so far
  std::string name;       // display name
  std::string endpoint;   // sample-plane endpoint (buffer shards), else empty
};

enum class interruption_source : uint8_t {
  imds_spot = 0,
  imds_rebalance = 1,
  sigterm = 2,
  console = 3,
  simulation = 4,
};
const char* interruption_source_name(interruption_source s);

// Every interruption source becomes this one message (DESIGN.md section 4).
struct interruption_notice {
  std::string node;
  interruption_source source = interruption_source::console;
  uint64_t deadline_unix_ms = 0;
  uint64_t issued_unix_ms = 0;
  std::string reason;
};

MOERL_MESSAGE_KIND(heartbeat, kind::heartbeat);
MOERL_MESSAGE_KIND(interruption_notice, kind::interruption_notice);

}  // namespace moerl::messages
