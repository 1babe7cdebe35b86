// One connection to one checkpoint cache (weights/wire.h): a DEALER socket, one request at a
// time, each answered within the timeout or given up on (a late answer is recognised by its
// request id and dropped). After a timeout the caller should drop the client and connect
// afresh: the cache may be dead, and a new socket leaves no old requests queued behind.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "zmq/context.h"

namespace moerl::weights {

class fabric_pusher;  // weights/fabric_push.h

struct cache_answer {
  nlohmann::json header;
  std::string payload;  // get: the chunk's bytes
};

class cache_client {
 public:
  static result<std::unique_ptr<cache_client>> connect(std::shared_ptr<zmq::zmq_context> ctx,
                                                       const std::string& endpoint, int timeout_ms);
  ~cache_client();
  // Sends one request and waits for its answer. The cache's error answer comes back as that
  // error; errc::timeout when none came in time.
  result<cache_answer> call(const std::string& verb, nlohmann::json header,
                            std::string_view payload = {});
  const std::string& endpoint() const { return endpoint_; }

 private:
  cache_client() = default;
  std::shared_ptr<zmq::zmq_context> ctx_;
  void* sock_ = nullptr;
  std::string endpoint_;
  int timeout_ms_ = 0;
  uint64_t next_rid_ = 1;
};

// Connections to checkpoint caches kept between requests, one per endpoint: a new socket per
// request cost a connect and handshake each time (~1 ms of every push in the default job). A
// connection whose request failed is dropped, so the next request connects afresh (see
// cache_client: a dead cache leaves no old requests queued behind). One thread at a time.
class cache_connections {
 public:
  cache_connections(std::shared_ptr<zmq::zmq_context> ctx, int timeout_ms)
      : ctx_(std::move(ctx)), timeout_ms_(timeout_ms) {}
  // The connection to `endpoint`, made now when there is none.
  result<cache_client*> connection(const std::string& endpoint);
  void drop(const std::string& endpoint) { clients_.erase(endpoint); }
  // Drops the connections to every endpoint not in `endpoints` (caches that left).
  void retain(const std::vector<std::string>& endpoints);
  const std::shared_ptr<zmq::zmq_context>& zmq() const { return ctx_; }

 private:
  std::shared_ptr<zmq::zmq_context> ctx_;
  int timeout_ms_;
  std::map<std::string, std::unique_ptr<cache_client>> clients_;
};

// Which part of a version a push carries: a whole version is shard 0 of 1. version_hash: the
// assembled version's content hash, named with shard 0 of a sharded version (readers check
// what they assemble against it); "" names none.
struct shard_tag {
  uint32_t shard = 0;
  uint32_t num_shards = 1;
  std::string version_hash;
};

// A put's header naming `version` and, for a shard of a sharded version, `shard` and
// `num_shards` (a whole version names neither: the wire's defaults).
nlohmann::json shard_header(uint64_t version, const shard_tag& tag);
// "version N" or "version N shard K", for messages.
std::string shard_what(uint64_t version, const shard_tag& tag);

// Puts a whole version (or one shard of it) into a cache in chunks of chunk_bytes (sha256
// each) with its content hash (sha256 of bytes). A chunk the cache refused for its hash is
// sent again, once.
status push_version(cache_client& cache, uint64_t version, const std::string& bytes,
                    const std::string& content_hash, uint64_t chunk_bytes,
                    const shard_tag& tag = {});

// Puts a version (or one shard of it) into one of `caches`: the least loaded that answers (with
// one cache, no load is asked), the next on failure. Returns the endpoint of the cache that
// holds it; the last failure when none took it. With `fabric` (weights.shard_push fabric) each
// cache is first tried with a fabric put; one that fails is logged and the same cache gets the
// ZeroMQ put. `content_hash`: sha256 of bytes.
result<std::string> push_to_a_cache(cache_connections& connections,
                                    const std::vector<std::string>& caches, uint64_t version,
                                    const std::string& bytes, const std::string& content_hash,
                                    uint64_t chunk_bytes, const shard_tag& tag = {},
                                    fabric_pusher* fabric = nullptr);

}  // namespace moerl::weights
