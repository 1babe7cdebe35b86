#include "common/hex.h"

namespace moerl {
namespace {

int nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string hex_encode(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

result<std::string> hex_decode(std::string_view hex, std::string_view what) {
  if (hex.size() % 2)
    return error(errc::malformed_message, std::string(what) + " has " + std::to_string(hex.size()) +
                                              " hex digits: not whole bytes");
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return error(errc::malformed_message, std::string(what) + " is not hex (at character " +
                                                std::to_string(hi < 0 ? 2 * i : 2 * i + 1) + ")");
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

}  // namespace moerl
