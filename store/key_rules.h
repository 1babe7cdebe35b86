// What a store key may be, the same for every backend, so that a key that works against
// the local directory also works against S3 and cannot escape the store's root.
//
// A key is 1..1024 bytes of '/'-separated segments. Every segment is non-empty, is not
// "." or "..", and does not start with ".moerl-" (reserved for the local backend's
// temporary files). No leading '/', no control characters (bytes < 0x20 and 0x7f).
#pragma once

#include <string>

#include "common/error.h"

namespace moerl::store {

inline constexpr const char* reserved_segment_prefix = ".moerl-";
inline constexpr size_t max_key_bytes = 1024;  // S3's limit on a key's UTF-8 length

// errc::invalid_argument naming the key and the broken rule.
status validate_key(const std::string& key);

// A list prefix: empty, or a key's leading part. The segments before its last '/' follow
// the key rules; the text after it is matched as a plain string prefix of a segment.
status validate_prefix(const std::string& prefix);

}  // namespace moerl::store
