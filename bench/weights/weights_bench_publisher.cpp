#include "bench/weights/weights_bench_publisher.h"

#include <nlohmann/json.hpp>

#include "bench/support.h"
#include "bench/weights/weights_bench_reader.h"
#include "common/config.h"
#include "common/status_try.h"
#include "job/grpo_job.h"
#include "policy/params.h"

namespace moerl::bench {

status put_bench_version(store::object_store& store, const std::string& bytes) {
  const std::string key = job::weights_key(kBenchStorePrefix, kBenchVersion);
  STATUS_TRY(store.put(key, bytes));
  return store.put(key + ".hash", policy::content_hash(bytes));
}

status run_weights_publisher(const weights_publisher_args& args) {
  if (args.bytes < 1)
    return error(errc::invalid_argument,
                 "weights-publisher --bytes must be positive, got " + std::to_string(args.bytes));
  ASSIGN_OR_RETURN(auto cfg, config::load("", args.overrides));
  ASSIGN_OR_RETURN(auto store, store::open_store(args.url, cfg));
  const std::string bytes = random_payload(args.bytes, static_cast<uint64_t>(args.bytes));
  const auto t0 = bench_clock::now();
  STATUS_TRY(put_bench_version(*store, bytes));
  return write_report_file(args.out, nlohmann::json{{"publish_s", seconds_since(t0)}});
}

}  // namespace moerl::bench
