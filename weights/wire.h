// The weight plane's wire protocol over ZeroMQ (weights/PROTOCOL.md has the whole story).
// A client (DEALER) sends [verb][header JSON][payload, put only]; the cache (ROUTER) answers
// [status "ok"|"error"][header JSON][payload, get only]. Every header carries the client's
// request id "rid", echoed in the answer, so a client drops a late answer to a request it
// already gave up on. An error header holds "code" (errc number) and "error" (the reason).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace moerl::weights::wire {

inline constexpr const char* kMeta = "meta";  // {version} -> {bytes, content_hash, chunk_bytes,
                                              //               num_chunks, load}
inline constexpr const char* kGet = "get";    // {version, chunk} -> {offset, chunk_hash} + bytes
inline constexpr const char* kPut = "put";    // {version, offset, total_bytes, content_hash,
                                              //  chunk_hash} + bytes -> {received, complete}
inline constexpr const char* kLoad = "load";  // {} -> {load, versions}

inline constexpr const char* kOk = "ok";
inline constexpr const char* kError = "error";

// The error header of `e` for request `rid`.
inline nlohmann::json error_header(uint64_t rid, const error& e) {
  return {{"rid", rid}, {"code", static_cast<int>(e.code)}, {"error", e.message}};
}

// The error an error header names (errc::malformed_message when it names none).
inline error error_of(const nlohmann::json& h) {
  const int code = h.value("code", static_cast<int>(errc::malformed_message));
  return error(static_cast<errc>(code), h.value("error", std::string("error without a reason")));
}

// A header field that must be an unsigned integer; errc::invalid_argument names it.
inline result<uint64_t> uint_field(const nlohmann::json& h, const char* name) {
  auto it = h.find(name);
  if (it == h.end() || !it->is_number_unsigned())
    return error(errc::invalid_argument,
                 std::string("request field '") + name + "' missing or not an unsigned integer");
  return it->get<uint64_t>();
}

}  // namespace moerl::weights::wire
