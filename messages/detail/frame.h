// Private to messages/: the frame around a Cap'n Proto message and the guarded decode
// path shared by every message kind. Not included outside messages/.
#pragma once

#ifndef MOERL_INSIDE_moerl_messages
#error \
    "messages/detail/frame.h is private to moerl_messages (messages/): include its public headers"
#endif

#include <cstring>
#include <string>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>
#include <kj/exception.h>

#include "common/status_try.h"
#include "messages/codec.h"

namespace moerl::messages::detail {

constexpr size_t kHeaderBytes = 8;

// Frames a built message: header + flat array.
std::string frame(kind k, capnp::MessageBuilder& builder);

// Checks magic, version, reserved bytes, kind range and size limits.
result<kind> check_header(const void* data, size_t size, const decode_limits& lim);

// Validates the frame, builds a bounded reader and hands the root to `read`, turning every
// Cap'n Proto failure (kj::Exception) into an error value. `read` may also return an error
// for semantic violations (e.g. mismatched list lengths).
template <class Schema, class T, class ReadFn>
result<T> decode_frame(kind expected, const void* data, size_t size, const decode_limits& lim,
                       ReadFn read) {
  ASSIGN_OR_RETURN(auto k, check_header(data, size, lim));
  if (k != expected)
    return error{errc::malformed_message, std::string("expected a ") + kind_name(expected) +
                                              " message, got " + kind_name(k)};
  const size_t payload = size - kHeaderBytes;
  if (payload == 0 || payload % sizeof(capnp::word) != 0)
    return error{errc::truncated_message, std::string(kind_name(expected)) + ": payload of " +
                                              std::to_string(payload) +
                                              " bytes is not a whole number of words"};
  // Copy into word-aligned memory: network buffers carry no alignment guarantee.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(payload / sizeof(capnp::word));
  std::memcpy(words.begin(), static_cast<const char*>(data) + kHeaderBytes, payload);
  capnp::ReaderOptions opts;
  opts.traversalLimitInWords =
      lim.traversal_limit_words ? lim.traversal_limit_words : (words.size() * 4 + 64);
  opts.nestingLimit = lim.nesting_limit;
  T out{};
  try {
    const size_t expected_words = capnp::expectedSizeInWordsFromPrefix(words.asPtr());
    if (expected_words > words.size())
      return error{errc::truncated_message,
                   std::string(kind_name(expected)) + ": segment table declares " +
                       std::to_string(expected_words) + " words, frame has " +
                       std::to_string(words.size())};
    if (expected_words < words.size())
      return error{errc::malformed_message, std::string(kind_name(expected)) + ": " +
                                                std::to_string(words.size() - expected_words) +
                                                " trailing words after the message"};
    capnp::FlatArrayMessageReader reader(words.asPtr(), opts);
    if (auto st = read(reader.getRoot<Schema>(), out); !st) return st.err();
  } catch (const kj::Exception& e) {
    return error{errc::malformed_message,
                 std::string(kind_name(expected)) + ": " + e.getDescription().cStr()};
  } catch (const std::exception& e) {
    return error{errc::malformed_message, std::string(kind_name(expected)) + ": " + e.what()};
  }
  return out;
}

inline kj::StringPtr text(const std::string& s) { return kj::StringPtr(s.c_str(), s.size()); }
inline std::string str(capnp::Text::Reader t) { return std::string(t.cStr(), t.size()); }

template <class ListBuilder, class Vec>
void fill(ListBuilder list, const Vec& v) {
  for (unsigned i = 0; i < v.size(); ++i) list.set(i, v[i]);
}
template <class Vec, class ListReader>
void copy(Vec& v, ListReader list) {
  v.reserve(list.size());
  for (auto x : list) v.push_back(x);
}

}  // namespace moerl::messages::detail
