#include "store/key_rules.h"

#include <cstring>

namespace moerl::store {

namespace {

error bad(const std::string& what, const std::string& text, const std::string& why) {
  return error(errc::invalid_argument, "invalid store " + what + " '" + text + "': " + why);
}

// Checks every complete segment of `path` (all of it: `path` holds no partial segment).
status check_segments(const std::string& what, const std::string& text, const std::string& path) {
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find('/', begin);
    if (end == std::string::npos) end = path.size();
    const std::string seg = path.substr(begin, end - begin);
    if (seg.empty()) return bad(what, text, "empty path segment (leading, trailing or double '/')");
    if (seg == "." || seg == "..") return bad(what, text, "'" + seg + "' segments are not allowed");
    if (seg.rfind(reserved_segment_prefix, 0) == 0)
      return bad(what, text,
                 std::string("segments starting with '") + reserved_segment_prefix +
                     "' are reserved for the store's temporary files");
    begin = end + 1;
  }
  return ok_status();
}

status check_bytes(const std::string& what, const std::string& text) {
  if (text.size() > max_key_bytes)
    return bad(what, text.substr(0, 64) + "...",
               "longer than " + std::to_string(max_key_bytes) + " bytes");
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return bad(what, text, "contains a control character");
  }
  if (!text.empty() && text[0] == '/') return bad(what, text, "absolute paths are not allowed");
  return ok_status();
}

}  // namespace

status validate_key(const std::string& key) {
  if (key.empty()) return bad("key", key, "empty");
  if (auto st = check_bytes("key", key); !st) return st;
  return check_segments("key", key, key);
}

status validate_prefix(const std::string& prefix) {
  if (prefix.empty()) return ok_status();
  if (auto st = check_bytes("prefix", prefix); !st) return st;
  const size_t slash = prefix.rfind('/');
  if (slash == std::string::npos) return ok_status();
  return check_segments("prefix", prefix, prefix.substr(0, slash));
}

}  // namespace moerl::store
