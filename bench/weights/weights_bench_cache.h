// The checkpoint cache of `moerl bench weights`' netns paths (bench/weights/weights_bench.h):
// a process the bench starts inside a namespace of its own ("another host"), since a cache
// thread in the bench would sit in the real host's namespace, out of the readers' reach.
// It makes the bench's version bytes itself (random_payload seeded with the size, as the
// bench does), holds them as versions 1..num_versions (one buffer shared), serves
// them like a weights node (weights/cache_server.h), writes its endpoint to `ready_file`
// once bound, and exits when the bench that started it is gone or sends SIGTERM. The push
// paths' cache (num_versions 0) holds nothing at first and takes puts, fabric ones through
// `fabric_provider` (weights/PROTOCOL.md "Fabric puts"), keeping the newest few.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace moerl::bench {

struct weights_cache_args {
  std::string bind;  // tcp://ADDR:PORT
  int64_t bytes = 0;
  int num_versions = 1;
  uint64_t chunk_bytes = 1 << 20;
  std::string ready_file;
  std::string fabric_provider;  // non-empty: takes fabric puts through this provider
};

status run_weights_cache(const weights_cache_args& args);

}  // namespace moerl::bench
