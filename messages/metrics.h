// Metrics snapshots (schema: messages/metrics.capnp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "messages/codec.h"

namespace moerl::messages {

struct metric {
  std::string name;
  double value = 0.0;
  std::vector<std::pair<std::string, std::string>> labels;
};

struct metrics_snapshot {
  std::string node;
  uint64_t unix_ms = 0;
  std::vector<metric> metrics;
};

MOERL_MESSAGE_KIND(metrics_snapshot, kind::metrics_snapshot);

}  // namespace moerl::messages
