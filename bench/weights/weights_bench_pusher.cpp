#include "bench/weights/weights_bench_pusher.h"

#include <nlohmann/json.hpp>

#include "bench/support.h"
#include "common/status_try.h"
#include "store/digest.h"
#include "weights/cache_client.h"
#include "weights/fabric_push.h"
#include "zmq/context.h"

namespace moerl::bench {

status run_weights_pusher(const weights_pusher_args& args) {
  constexpr int kTimeoutMs = 60000;  // one put of the largest size on a loaded host
  const std::string bytes = random_payload(args.bytes, static_cast<uint64_t>(args.bytes));
  const std::string sha = store::sha256_hex(bytes);
  ASSIGN_OR_RETURN(auto ctx, zmq::zmq_context::create());
  ASSIGN_OR_RETURN(auto cache, weights::cache_client::connect(ctx, args.at, kTimeoutMs));
  fabric::transport_options options;
  options.provider = args.provider;
  options.require_provider = args.provider != "auto";
  weights::fabric_pusher fabric(options, kTimeoutMs);
  std::vector<double> zmq_s, fabric_s;
  for (int r = 0; r < args.warmup + args.reps; ++r) {
    const uint64_t v = 2 * static_cast<uint64_t>(r) + 1;
    auto t0 = bench_clock::now();
    STATUS_TRY(weights::push_version(*cache, v, bytes, sha, args.chunk_bytes));
    const double z = seconds_since(t0);
    t0 = bench_clock::now();
    STATUS_TRY(fabric.push(*cache, v + 1, bytes, sha));
    const double f = seconds_since(t0);
    if (r >= args.warmup) {
      zmq_s.push_back(z);
      fabric_s.push_back(f);
    }
  }
  const auto* d = fabric.describe();
  const nlohmann::json out{{"zmq_s", zmq_s},
                           {"fabric_s", fabric_s},
                           {"fabric_path", fabric.last_path()},
                           {"provider", d ? d->provider : std::string()}};
  return write_report_file(args.out, out);
}

}  // namespace moerl::bench
