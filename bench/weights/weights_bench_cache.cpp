#include "bench/weights/weights_bench_cache.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>

#include "bench/support.h"
#include "common/status_try.h"
#include "weights/cache_server.h"
#include "weights/version_cache.h"
#include "zmq/context.h"

namespace moerl::bench {
namespace {

std::atomic<bool> g_stop{false};
void on_term(int) { g_stop = true; }

}  // namespace

status run_weights_cache(const weights_cache_args& args) {
  ::signal(SIGTERM, on_term);
  const pid_t parent = getppid();
  ASSIGN_OR_RETURN(auto ctx, zmq::zmq_context::create());
  // Pushed versions (num_versions 0): the newest few of them, older ones evicted.
  constexpr int kPushedVersions = 4;
  const int capacity = args.num_versions > 0 ? args.num_versions : kPushedVersions;
  auto cache = std::make_shared<weights::version_cache>(
      capacity, static_cast<uint64_t>(args.bytes) * capacity);
  if (args.num_versions > 0) {
    auto bytes = std::make_shared<const std::string>(
        random_payload(args.bytes, static_cast<uint64_t>(args.bytes)));
    const auto first = weights::make_cached_version(1, bytes, args.chunk_bytes);
    for (int v = 1; v <= args.num_versions; ++v) {
      weights::cached_version copy = first;  // the bytes are shared, the hashes copied
      copy.version = static_cast<uint64_t>(v);
      STATUS_TRY(cache->insert(std::move(copy)));
    }
  }
  ASSIGN_OR_RETURN(auto server,
                   weights::cache_server::bind(ctx, args.bind, cache, args.chunk_bytes));
  if (!args.fabric_provider.empty()) {
    fabric::transport_options options;
    options.provider = args.fabric_provider;
    options.require_provider = args.fabric_provider != "auto";
    constexpr int64_t kPutTimeoutMs = 60000;  // a put of the largest size on a loaded host
    server->enable_fabric_puts(options, kPutTimeoutMs);
  }
  {
    const std::string tmp = args.ready_file + ".tmp";
    std::ofstream(tmp) << server->endpoint();
    std::filesystem::rename(tmp, args.ready_file);  // whole or absent
  }
  while (!g_stop && getppid() == parent) STATUS_TRY(server->poll(100));
  return ok_status();
}

}  // namespace moerl::bench
