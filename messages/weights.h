// Weight-version manifest (schema: messages/weights.capnp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/codec.h"

namespace moerl::messages {

struct weight_part {
  std::string name;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  std::string sha256;
};

struct weight_manifest {
  uint64_t version = 0;
  std::string content_hash;
  uint64_t total_bytes = 0;
  std::vector<weight_part> parts;
  uint64_t created_unix_ms = 0;
};

MOERL_MESSAGE_KIND(weight_manifest, kind::weight_manifest);

}  // namespace moerl::messages
