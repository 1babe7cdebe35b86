// A rollout node's supply of policy versions: one per node, shared by its rollout workers.
// A background thread fetches each newly announced version from the checkpoint caches while
// the workers still generate on the previous one (weights/version_reader.h: least-loaded
// cache, resume elsewhere, the store on a miss), so a worker switches versions between units
// without waiting; a version a lease names that was not prefetched is fetched on demand.
// Every version handed out was verified whole (content hash). Without caches
// (weights.from_cache=false) the feed reads every version from the store on demand and
// records the same figures (bytes_from.store, when each version arrived), so the report's
// redistribution and time-to-productive figures exist on that path too. With fan-out
// (weights.fanout: the directory holds this node's peer server) versions come from the
// node's parent in the tree over the rollout nodes present, and the node serves them on
// (weights/FANOUT.md). Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "weights/cache_directory.h"
#include "weights/fanout_reader.h"
#include "weights/version_reader.h"

namespace moerl::job {

class weights_feed {
 public:
  // store_read(v): version v's durable copy, checked against its hash (the fallback).
  // caches null: store only, no prefetch. same_host_shm: weights.same_host_shm. assemble: how
  // a sharded version's shards make the full version (job/sharded_publication.h); without it
  // a sharded version is read from the store.
  weights_feed(std::shared_ptr<weights::cache_directory> caches, int timeout_ms, bool same_host_shm,
               std::function<result<std::string>(uint64_t)> store_read,
               weights::shard_assembler assemble = {});
  ~weights_feed();
  weights_feed(const weights_feed&) = delete;
  weights_feed& operator=(const weights_feed&) = delete;

  // The bytes of `version` (> 0), fetched now unless held already.
  result<std::shared_ptr<const std::string>> get(uint64_t version);
  // bytes_from, failovers, and when this node came to hold each version and from where
  // (held_unix_ms, held_bytes_from: for the report's redistribution times and source mix).
  nlohmann::json stats() const;

 private:
  struct held_version {
    std::shared_ptr<const std::string> bytes;
    std::string source;
    int64_t held_unix_ms = 0;
  };
  result<std::shared_ptr<const std::string>> fetch_locked(uint64_t version);  // fetch_mu_ held
  result<weights::fetched_version> fetch_from_caches(uint64_t version);
  result<weights::fetched_version> fetch_from_store(uint64_t version);
  void prefetch_loop();

  std::shared_ptr<weights::cache_directory> caches_;
  std::function<result<std::string>(uint64_t)> store_read_;
  std::mutex fetch_mu_;  // one fetch at a time (the reader holds its sockets); before mu_
  weights::version_reader reader_;
  // weights.fanout (the directory serves peers): versions come through the fan-out tree
  // (weights/FANOUT.md) instead of reader_; null otherwise.
  std::unique_ptr<weights::fanout_reader> fanout_;
  mutable std::mutex mu_;
  std::map<uint64_t, held_version> held_;        // the newest few, bytes and all
  std::map<uint64_t, int64_t> held_at_unix_ms_;  // every version held, bounded
  // Per version held: the bytes its fetch read from caches, peers and the store (bounded as
  // held_at_unix_ms_): the report's per-version source mix.
  std::map<uint64_t, std::array<uint64_t, 3>> held_from_;
  weights::reader_counters counters_;  // a copy of the reader's (store only: its own), under mu_
  int64_t first_weights_unix_ms_ = 0;
  std::atomic<bool> stop_{false};
  std::thread prefetcher_;
};

}  // namespace moerl::job
