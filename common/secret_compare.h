// Comparing a presented secret (a bearer or console token) with the configured one in time
// that does not depend on where they differ, so a client timing its refusals cannot find the
// token a byte at a time.
#pragma once

#include <cstddef>
#include <string_view>

namespace moerl {

// True when `presented` equals `secret`. The time depends on presented.size() only (the
// client's own input), never on the bytes compared or on the first mismatch.
inline bool secret_equals(std::string_view presented, std::string_view secret) {
  unsigned char diff = presented.size() == secret.size() ? 0 : 1;
  const size_t n = secret.size();
  for (size_t i = 0; i < presented.size(); ++i)
    diff |= static_cast<unsigned char>(presented[i] ^ (n ? secret[i % n] : 0));
  // Every byte is folded in without a branch; the volatile read keeps the compiler from
  // turning the fold back into a comparison that stops at the first difference.
  volatile unsigned char result = diff;
  return result == 0;
}

}  // namespace moerl
