// A checkpoint cache's server: one ROUTER socket that answers the weight plane's requests
// (weights/wire.h) from a version_cache. The trainer puts each new version here once, in
// chunks that each carry their sha256; the version enters the cache only when every byte
// arrived and the whole matches the content hash the pusher named. Readers ask for a version's
// meta, then its chunks. A bad request (unknown verb, garbage header, unknown version, a chunk
// or range outside the version) gets an error answer naming the problem; the server keeps
// serving. Threading: poll() from one thread at a time (the socket is not thread-safe); the
// cache itself may be filled from another thread (replication from a peer cache).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "weights/arriving_version.h"
#include "weights/fabric_push.h"
#include "weights/shm_copy.h"
#include "weights/version_cache.h"
#include "zmq/context.h"

namespace moerl::weights {

struct server_counters {
  uint64_t num_requests = 0;
  uint64_t num_bad_requests = 0;    // answered with an error
  uint64_t bytes_served = 0;        // chunk payload sent to readers
  uint64_t num_versions_put = 0;    // versions (shards of one: each) completed by a pusher
  uint64_t num_chunks_refused = 0;  // put chunks whose hash did not match (the pusher resends)
  uint64_t num_shm_copies = 0;   // versions (shards) written to sealed memfds for same-host readers
  uint64_t num_fabric_puts = 0;  // versions (shards) that entered through a fabric put
  uint64_t num_fabric_puts_failed = 0;  // fabric puts refused at commit or expired mid-write
  uint64_t fabric_regions = 0;          // landing regions held now (puts in progress)
  nlohmann::json to_json() const;
};

class cache_server {
 public:
  // Binds `endpoint` ("tcp://127.0.0.1:*" picks a port; endpoint() tells which). The cache
  // splits versions into chunk_bytes chunks for readers.
  static result<std::unique_ptr<cache_server>> bind(std::shared_ptr<zmq::zmq_context> ctx,
                                                    const std::string& endpoint,
                                                    std::shared_ptr<version_cache> cache,
                                                    uint64_t chunk_bytes);
  ~cache_server();
  // Answers every request that arrives within timeout_ms (waits at most that long for the
  // first one, then takes what is queued). Errors only for socket failures.
  status poll(int timeout_ms);
  const std::string& endpoint() const { return endpoint_; }
  version_cache& cache() { return *cache_; }
  server_counters counters() const { return counters_; }
  // Chunk bytes served over the last two seconds: what readers compare to pick a cache.
  uint64_t load() const;
  // Readers on this host that ask (version_reader's same_host_shm) get the version (or each
  // shard of it) through a sealed memfd (weights/shm_copy.h) instead of chunks. One version at
  // a time has such copies (the newest asked for), so the cache's memory is at most one
  // version above weights.cache_bytes.
  void enable_same_host_shm(bool on);
  // A reader serving its peers (weights/FANOUT.md): versions still arriving there are served
  // chunk by chunk as they arrive, after the whole versions in the cache. Call before poll().
  void serve_arriving(std::shared_ptr<const arriving_versions> arriving) {
    arriving_ = std::move(arriving);
  }
  // Takes fabric puts (put_begin, put_commit; weights/PROTOCOL.md "Fabric puts") through a
  // transport opened at the first one. A put not committed within put_timeout_ms frees its
  // region. Without this call put_begin is refused, and pushers use the ZeroMQ put.
  void enable_fabric_puts(fabric::transport_options options, int64_t put_timeout_ms);
  // The landing transport's provider ("" before the first fabric put).
  std::string fabric_provider() const;

 private:
  cache_server() = default;
  struct staged_put {  // a version arriving from a pusher
    uint64_t total_bytes = 0;
    std::string content_hash;
    uint32_t num_shards = 1;
    std::string bytes;
    std::set<uint64_t> offsets;  // chunks received, by offset
    uint64_t received = 0;
    int64_t touched_ms = 0;
  };
  status serve_one();
  result<nlohmann::json> handle(const std::string& verb, const nlohmann::json& h,
                                const std::string& payload,
                                std::shared_ptr<const cached_version>* send);
  result<nlohmann::json> handle_put(const nlohmann::json& h, const std::string& payload);
  result<nlohmann::json> handle_put_begin(const nlohmann::json& h);
  result<nlohmann::json> handle_put_commit(const nlohmann::json& h);
  // A put's whole bytes: checked against the content hash the pusher named, then held
  // (the ZeroMQ and the fabric put end here alike).
  status admit(uint64_t version, uint32_t shard, uint32_t num_shards,
               std::shared_ptr<const std::string> bytes, const std::string& content_hash,
               const std::string& version_hash, const std::string& what);
  void free_fabric_put(uint32_t ticket, bool failed);
  void count_served(uint64_t n);

  std::shared_ptr<zmq::zmq_context> ctx_;
  void* sock_ = nullptr;
  std::string endpoint_;
  std::shared_ptr<version_cache> cache_;
  uint64_t chunk_bytes_ = 0;
  std::map<std::pair<uint64_t, uint32_t>, staged_put> staged_;  // by (version, shard)
  server_counters counters_;
  std::string shm_host_;  // host_identity of this process when the shm path is on, else ""
  std::map<uint32_t, std::unique_ptr<shm_copy>> shm_;  // by shard, of one version
  std::shared_ptr<const arriving_versions> arriving_;  // null: whole versions only
  struct fabric_put {  // a version landing through the fabric, by ticket
    uint64_t version = 0;
    uint32_t shard = 0, num_shards = 1;
  };
  std::unique_ptr<fabric_landing> landing_;  // null: no fabric puts
  std::map<uint32_t, fabric_put> fabric_puts_;
  // The same-host copy of `cv` when the reader's host is ours (null otherwise or on failure).
  const shm_copy* shm_copy_for(const cached_version& cv, const nlohmann::json& request);
  int64_t bucket_ms_ = 0;  // the load's one-second buckets
  uint64_t bucket_now_ = 0, bucket_prev_ = 0;
};

}  // namespace moerl::weights
