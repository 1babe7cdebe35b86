// Encoding and decoding of every message that crosses a process boundary.
//
// Wire frame: 8-byte header, then a Cap'n Proto flat-array message.
//   bytes 0..3  magic "MOE" + frame version (1)
//   bytes 4..5  message kind (little-endian uint16, moerl::messages::kind)
//   bytes 6..7  reserved, must be zero
// Bytes from the network are untrusted: decode<T>() never throws and never crashes; a
// truncated, oversized or malformed input yields an error (truncated_message,
// message_too_large, malformed_message) naming what was wrong. Cap'n Proto traversal and
// nesting limits bound the work a hostile message can cause.
// Thread-safety: all functions are pure and may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"

namespace moerl::messages {

enum class kind : uint16_t {
  work_unit = 1,
  lease = 2,
  lease_request = 3,
  unit_report = 4,
  sample = 5,
  sample_ack = 6,
  credit = 7,
  batch_request = 8,
  batch = 9,
  weight_manifest = 10,
  heartbeat = 11,
  interruption_notice = 12,
  admin_request = 13,
  admin_reply = 14,
  metrics_snapshot = 15,
  error = 16,
  lease_batch = 17,
  lease_give_back = 18,
  prompt = 19,
  ledger_events = 20,
  shard_ack = 21,
  trainer_claim = 22,
  trainer_claim_reply = 23,
  shard_reports = 24,
  shard_reports_reply = 25,
};
constexpr uint16_t kMaxKind = 25;

const char* kind_name(kind k);

struct decode_limits {
  size_t max_bytes = 64u << 20;        // whole frame, header included
  uint64_t traversal_limit_words = 0;  // 0: derived from the frame size (4x its words)
  int nesting_limit = 16;              // our schemas nest at most 4 deep
};

// The kind named in a frame's header, after checking magic, version and size bounds.
result<kind> peek_kind(const void* data, size_t size, const decode_limits& lim = {});

// Defined for every message struct in messages/*.h (see kind_of<T>).
template <class T>
std::string encode(const T& msg);

template <class T>
result<T> decode(const void* data, size_t size, const decode_limits& lim = {});

template <class T>
result<T> decode(const std::string& bytes, const decode_limits& lim = {}) {
  return decode<T>(bytes.data(), bytes.size(), lim);
}

// Maps a message struct to its kind; specialised next to each struct.
template <class T>
struct kind_of;

}  // namespace moerl::messages

#define MOERL_MESSAGE_KIND(type, k)                     \
  template <>                                           \
  struct kind_of<type> {                                \
    static constexpr ::moerl::messages::kind value = k; \
  }
