// One reader process of `moerl bench weights` (bench/weights/weights_bench.h): it connects to
// the bench's control socket, says it is ready, and on each "go" fetches the version from its
// source exactly as a rollout node would (a cache through weights::version_reader, or the
// store with its hash checked; or, for fan-out, from the reader above it in the tree over the
// readers the "go" lists, serving what it holds to the readers below), answering "done" with the
// steady-clock time it held a verified copy. It exits on "exit", or when the bench that started it
// is gone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::bench {

struct weights_reader_args {
  std::string control;  // the bench's ROUTER endpoint
  // "cache", "cache_shm" (its same-host path), "fanout" (from the readers' tree, its root
  // from the cache: weights/FANOUT.md) or "store"
  std::string source;
  std::string at;                          // the cache's endpoint, or the store's URL
  uint64_t version = 1;                    // fanout: each "go" names the version instead
  int degree = 2;                          // fanout: children per reader
  std::string bind = "tcp://127.0.0.1:*";  // fanout: where this reader serves its peers
  std::vector<std::string> overrides;      // config key=value (store.s3_endpoint, ...)
};

// The store prefix the bench writes its version under (job::weights_key(prefix, v)).
inline constexpr const char* kBenchStorePrefix = "bench-weights";
// The version the bench publishes and its readers read (fan-out deliveries name later ones).
inline constexpr uint64_t kBenchVersion = 1;

status run_weights_reader(const weights_reader_args& args);

}  // namespace moerl::bench
