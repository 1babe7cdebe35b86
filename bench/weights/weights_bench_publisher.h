// The store paths' publish in `moerl bench weights` (bench/weights/weights_bench.h): a
// version's bytes and their content hash put under the bench's key, what a trainer writes to
// the store and what a reader (weights_bench_reader.h) reads and checks. store_local and
// store_s3 publish from the bench's own process; store_s3_netns's moto runs on a network
// namespace the bench's cannot reach, so the bench starts `moerl bench weights-publisher` beside
// it (its host 0), which makes the bench's bytes itself (random_payload seeded with the size,
// as the bench does), puts them and writes {publish_s} to `out`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "store/object_store.h"

namespace moerl::bench {

// Puts `bytes` as the bench's version (job::weights_key(kBenchStorePrefix, 1)) and its
// content hash beside it.
status put_bench_version(store::object_store& store, const std::string& bytes);

struct weights_publisher_args {
  std::string url;  // the store's URL (s3://bucket/prefix)
  int64_t bytes = 0;
  std::vector<std::string> overrides;  // config key=value (store.s3_endpoint, ...)
  std::string out;                     // the result's file, written whole
};

status run_weights_publisher(const weights_publisher_args& args);

}  // namespace moerl::bench
