// A reader that takes part in fan-out (weights/FANOUT.md): it reads a version from the
// sources weights/fanout_plan.h names (its ancestors among the readers, then the caches),
// chunk by chunk, and while it reads it serves what arrived to the readers below it through
// its peer_server. A chunk its source has not received yet is asked for again shortly; a
// source that fails, answers nothing within the request timeout, or makes no progress for
// stall_ms is left for the next one, which resumes at the chunk reached (num_failovers).
// Every chunk is checked against its sha256 (a mismatch is fetched once more, counted as
// num_chunk_refetches, then the next source is tried) and the whole version against the
// content hash before it is handed out or served whole. Bytes are counted by where they
// came from: bytes_from.peer (another reader) or bytes_from.cache, and the store when no
// source could serve it. A version the caches hold in shards (a trainer group's sharded
// publication) is read by the caller's sharded reader, which fetches the shards in parallel
// and assembles them; this reader then serves the assembled version whole, so the readers
// below it read one version from it as from any peer: shards travel cache -> first reader,
// whole versions reader -> reader. Not thread-safe: one fetch at a time (it holds its sockets).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "weights/cache_client.h"
#include "weights/fanout_plan.h"
#include "weights/peer_server.h"
#include "weights/version_reader.h"
#include "zmq/context.h"

namespace moerl::weights {

class fanout_reader {
 public:
  // self: this reader's server (null: read only, serve nothing). timeout_ms bounds each
  // request; stall_ms how long a source may go without a new chunk.
  fanout_reader(std::shared_ptr<zmq::zmq_context> ctx, std::shared_ptr<peer_server> self,
                int timeout_ms, int stall_ms);
  // `sources`: nearest first (fanout_sources). from_store: the durable copy, checked by the
  // callee (null: none; errc::not_found when no source served the version).
  result<fetched_version> fetch(uint64_t version, const std::vector<fanout_source>& sources,
                                const std::function<result<std::string>()>& from_store);
  const reader_counters& counters() const { return counters_; }
  // Reads a version a cache holds in shards (weights/PROTOCOL.md, "Sharded versions"): the
  // shards from the caches, assembled and checked against the version's hash; it counts its
  // own bytes. Without one such a version is not read from the caches (the store copy is).
  using sharded_reader = std::function<result<fetched_version>(uint64_t version)>;
  void set_sharded_reader(sharded_reader f) { sharded_ = std::move(f); }
  // Called after each chunk is held, with (chunk, num_chunks): tests pause a reader here to
  // kill it mid-transfer at a known point.
  void on_chunk(std::function<void(uint64_t, uint64_t)> f) { on_chunk_ = std::move(f); }

 private:
  struct meta {
    uint64_t bytes = 0, chunk_bytes = 0, num_chunks = 0;
    std::string content_hash;
    uint64_t num_shards = 1;
  };
  cache_client* connection(const std::string& endpoint);
  // The version's meta from `src`; a peer that does not hold it yet is asked again until
  // stall_ms passed (it was told of the version when we were and is about to start).
  result<meta> ask_meta(const fanout_source& src, uint64_t version);
  // Reads the chunks `into` lacks from `src`, in order; false when the source failed.
  bool read_from(const fanout_source& src, arriving_version& into);
  // Serves `bytes` whole from now on (a version read from shards, or arrived chunk by chunk).
  void serve_whole(cached_version v);

  std::shared_ptr<zmq::zmq_context> ctx_;
  std::shared_ptr<peer_server> self_;
  int timeout_ms_, stall_ms_;
  std::map<std::string, std::unique_ptr<cache_client>> connections_;
  reader_counters counters_;
  std::function<void(uint64_t, uint64_t)> on_chunk_;
  sharded_reader sharded_;
};

}  // namespace moerl::weights
