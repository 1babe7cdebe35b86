// Puts over the fabric (weights/PROTOCOL.md, "Fabric puts"; issue 27): a pusher asks a cache
// for a landing region of its version's (or shard's) size with `put_begin`, writes the bytes
// straight into it through fabric/transport.h (RMA writes with immediates to a cache on
// another host; stores into the cache's mapped memfd on this host), then names the sha256
// with `put_commit`. The cache counts the writes' immediates, hashes the landed bytes and
// only then holds the version exactly as a ZeroMQ put would have left it. One transport per
// side, opened at first use: the cache's lands every pusher's writes, the pusher's writes to
// whichever cache it pushes to.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "fabric/transport.h"
#include "weights/cache_client.h"

namespace moerl::weights {

// The cache's side: landing regions, one per fabric put in progress. Used by the cache
// server's thread only (the transport's threading rule).
class fabric_landing {
 public:
  // put_timeout_ms: a region whose put was not committed within this is freed (its pusher
  // died or gave up mid-write).
  fabric_landing(fabric::transport_options options, int64_t put_timeout_ms);
  ~fabric_landing();
  fabric_landing(const fabric_landing&) = delete;
  fabric_landing& operator=(const fabric_landing&) = delete;

  // A region of `bytes` for a new put: the answer's fields (ticket, fabric_address, region,
  // write_bytes: the most bytes one write may carry, for the pusher to split by).
  result<nlohmann::json> begin(uint64_t bytes, uint64_t write_bytes);
  // Counts the immediates that arrived (the fabric makes progress only when asked).
  status progress();
  // The landed bytes of `ticket` once `writes` immediates were counted for it, progressing
  // for at most wait_ms; errc::timeout names how many arrived, errc::not_found a ticket
  // freed or never granted. The view lives until release().
  result<std::string_view> landed(uint32_t ticket, uint64_t writes, int wait_ms);
  // Frees the region (deregistered first: a late write fails at its writer).
  void release(uint32_t ticket);
  // Frees the regions older than the put timeout; returns their tickets.
  std::vector<uint32_t> expire();
  bool active() const { return !regions_.empty(); }
  size_t num_regions() const { return regions_.size(); }
  uint32_t oldest() const { return regions_.empty() ? 0 : regions_.begin()->first; }
  // The transport's description once opened (null before).
  const fabric::transport_description* describe() const;

 private:
  struct region {
    char* ptr = nullptr;
    size_t size = 0;
    int fd = -1;
    fabric::local_region reg;
    uint64_t writes = 0;   // immediates counted
    int64_t began_ns = 0;  // fabric::now_ns(), the time base of fabric/'s deadlines
  };
  void free_region(region& r);

  fabric::transport_options options_;
  int64_t put_timeout_ms_;
  std::unique_ptr<fabric::transport> transport_;
  std::map<uint32_t, region> regions_;  // by ticket (ascending: the oldest first)
  uint32_t next_ticket_ = 1;
  std::vector<uint32_t> imms_;
};

// What a cache granted for one fabric put.
struct fabric_grant {
  bool held = false;  // the cache holds the version (shard) already: nothing to write
  uint32_t ticket = 0;
  std::string cache_address;  // the cache's transport address (binary)
  fabric::remote_region region;
  uint64_t write_bytes = 0;
};

// The pusher's side: one transport (opened at the first push), used by one thread at a time.
class fabric_pusher {
 public:
  // timeout_ms bounds each step's waits (the writes' completions).
  fabric_pusher(fabric::transport_options options, int timeout_ms);
  ~fabric_pusher();
  fabric_pusher(const fabric_pusher&) = delete;
  fabric_pusher& operator=(const fabric_pusher&) = delete;

  // The whole put: begin, every write, commit. An error names the step; the cache then frees
  // the region (at once, or after its put timeout) and holds nothing of it. Thread-safe
  // (one push at a time); the steps below are not.
  status push(cache_client& cache, uint64_t version, const std::string& bytes,
              const std::string& content_hash, const shard_tag& tag = {});

  // The steps (a test stops between them).
  result<fabric_grant> begin(cache_client& cache, uint64_t version, uint64_t total_bytes,
                             const shard_tag& tag);
  // Writes bytes [from, to) of `bytes` into the granted region; returns how many writes carry
  // an immediate (0 on the same-host path: plain stores, ordered before the commit's message).
  result<uint64_t> write(const fabric_grant& grant, const std::string& bytes, uint64_t from,
                         uint64_t to);
  status commit(cache_client& cache, const fabric_grant& grant, uint64_t version,
                const std::string& content_hash, const shard_tag& tag, uint64_t writes);

  // How the last write reached the cache: "same_process", "same_host", "network" ("" before).
  const std::string& last_path() const { return last_path_; }
  // Whole puts that push() completed, and those that failed (their pusher fell back to zmq):
  // a caller sees which way its versions went without parsing the log.
  uint64_t num_pushed() const { return num_pushed_.load(); }
  uint64_t num_failed() const { return num_failed_.load(); }
  const fabric::transport_description* describe() const;

 private:
  status push_locked(cache_client& cache, uint64_t version, const std::string& bytes,
                     const std::string& content_hash, const shard_tag& tag);

  fabric::transport_options options_;
  int timeout_ms_;
  std::unique_ptr<fabric::transport> transport_;
  std::string last_path_;
  std::vector<uint32_t> imms_;
  std::mutex push_mu_;
  std::atomic<uint64_t> num_pushed_{0}, num_failed_{0};
};

// A pusher from config: weights.shard_push "fabric" gives one (fabric.* keys choose the
// provider), "zmq" none (null).
result<std::shared_ptr<fabric_pusher>> fabric_pusher_from_config(const config& cfg);

}  // namespace moerl::weights
