// The weight plane's wire protocol over ZeroMQ (weights/PROTOCOL.md has the whole story).
// A client (DEALER) sends [verb][header JSON][payload, put only]; the cache (ROUTER) answers
// [status "ok"|"error"][header JSON][payload, get only]. Every header carries the client's
// request id "rid", echoed in the answer, so a client drops a late answer to a request it
// already gave up on. An error header holds "code" (errc number) and "error" (the reason).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace moerl::weights::wire {

// meta, get and put name a shard of a sharded version with "shard" and "num_shards" (default 0
// and 1: a whole version); meta answers both.
inline constexpr const char* kMeta = "meta";  // {version} -> {bytes, content_hash, chunk_bytes,
                                              //               num_chunks, load}
inline constexpr const char* kGet = "get";    // {version, chunk} -> {offset, chunk_hash} + bytes
inline constexpr const char* kPut = "put";    // {version, offset, total_bytes, content_hash,
                                              //  chunk_hash} + bytes -> {received, complete}
inline constexpr const char* kLoad = "load";  // {} -> {load, versions}
// Fabric puts (weights/fabric_push.h): a landing region, then the sha256 once it is written.
inline constexpr const char* kPutBegin = "put_begin";    // {version, total_bytes} -> {ticket,
                                                         //  fabric_address, region, write_bytes}
inline constexpr const char* kPutCommit = "put_commit";  // {version, ticket, writes,
                                                         //  content_hash} -> {complete}

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

// A sharded version has at most this many shards (one per trainer rank).
inline constexpr uint64_t kMaxShards = 4096;

struct shard_id {
  uint32_t shard = 0;
  uint32_t num_shards = 1;
};

// A request's optional "shard" and "num_shards" (default 0 and 1); errc::invalid_argument
// names a mistyped field, a shard outside num_shards or num_shards outside [1, kMaxShards].
// A reader's meta and get may name the shard alone (need_count false); a put names both.
inline result<shard_id> shard_fields(const nlohmann::json& h, bool need_count) {
  shard_id out;
  if (h.contains("shard")) {
    auto s = uint_field(h, "shard");
    if (!s) return s.err();
    out.shard = static_cast<uint32_t>(std::min<uint64_t>(*s, kMaxShards));
  }
  if (h.contains("num_shards")) {
    auto n = uint_field(h, "num_shards");
    if (!n) return n.err();
    if (*n == 0 || *n > kMaxShards)
      return error(errc::invalid_argument, "num_shards " + std::to_string(*n) + " is outside [1, " +
                                               std::to_string(kMaxShards) + "]");
    out.num_shards = static_cast<uint32_t>(*n);
  }
  if (!need_count && !h.contains("num_shards")) return out;
  if (out.shard >= out.num_shards)
    return error(errc::invalid_argument, "shard " + std::to_string(out.shard) +
                                             " is outside a version of " +
                                             std::to_string(out.num_shards) + " shards");
  return out;
}

}  // namespace moerl::weights::wire
