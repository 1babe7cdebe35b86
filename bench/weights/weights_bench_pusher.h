// The pusher of `moerl bench weights`' push paths (bench/weights/weights_bench.h): a process
// the bench starts beside the cache (push_host) or on a network namespace of its own
// (push_netns), as a trainer member is to the cache it pushes its shard to. It makes the
// bench's version bytes (random_payload seeded with the size), then puts them to the cache
// warmup + reps times each way, interleaved so both see the same load: a ZeroMQ put
// (weights::push_version, put chunks) and a fabric put (weights::fabric_pusher: put_begin,
// writes into the cache's region, put_commit), each time as a new version (a held one is not
// written again). Writes {zmq_s, fabric_s, fabric_path, provider} to `out`; a fabric put that
// fails is an error, not a fallback (the bench times the path it names).
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace moerl::bench {

struct weights_pusher_args {
  std::string at;  // the cache's endpoint
  int64_t bytes = 0;
  int reps = 5;
  int warmup = 1;
  uint64_t chunk_bytes = 1 << 20;
  std::string provider = "auto";  // the pusher's fabric provider (fabric.provider)
  std::string out;                // the result's file, written whole
};

status run_weights_pusher(const weights_pusher_args& args);

}  // namespace moerl::bench
