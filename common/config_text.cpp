#include "common/config_text.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace moerl {
namespace {

constexpr size_t kMaxExcerptBytes = 80;

// Length of the well-formed UTF-8 sequence starting at p (at most n bytes there), 0 if it is
// not one: no overlong forms, no surrogates, nothing above U+10FFFF (RFC 3629).
size_t utf8_sequence_length(const unsigned char* p, size_t n) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (n < len || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return len;
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7F; }

std::string hex_digits(unsigned char c) {
  char buf[4];
  std::snprintf(buf, sizeof buf, "%02X", c);
  return buf;
}

}  // namespace

result<std::string> read_config_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{errc::invalid_config, path + ": cannot open config file"};
  // One byte past the limit is enough to know the file is too big.
  std::string text(kMaxConfigFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigFileBytes)
    return error{errc::invalid_config, path + ": larger than " +
                                           std::to_string(kMaxConfigFileBytes) +
                                           " bytes; not a config file"};
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = bytes[i];
    const size_t len = utf8_sequence_length(bytes + i, text.size() - i);
    const bool bad_control = len == 1 && is_control(c) && c != '\t' && c != '\n' && c != '\r';
    if (len == 0 || bad_control) {
      const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(i), '\n');
      return error{errc::invalid_config,
                   path + ":" + std::to_string(line) + ": not YAML text: byte 0x" + hex_digits(c) +
                       " at offset " + std::to_string(i) + " is " +
                       (len == 0 ? "not valid UTF-8" : "a control character") +
                       " (is this a config file?)"};
    }
    i += len;
  }
  return text;
}

std::string printable_excerpt(const std::string& text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = std::min(text.size(), kMaxExcerptBytes);
  std::string out;
  size_t i = 0;
  while (i < n) {
    const size_t len = utf8_sequence_length(bytes + i, text.size() - i);
    if (len == 0 || (len == 1 && is_control(bytes[i]))) {
      out += "\\x" + hex_digits(bytes[i]);
      ++i;
    } else {
      out.append(text, i, len);
      i += len;
    }
  }
  if (i < text.size()) out += "...";
  return out;
}

}  // namespace moerl
