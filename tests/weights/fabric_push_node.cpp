// One process of the fabric put tests (weights_fabric_push_test.cpp): a checkpoint cache that
// takes fabric puts, or a trainer member pushing one shard to it. Run in its own network
// namespace (another "host", tcp;ofi_rxm) or beside the test (the same host: stores into the
// cache's memfd). It talks to the test through files in DIR (namespaces share the
// filesystem):
//   cache.ready     bound (holds the endpoint);   stop (test) write cache.json and exit;
//   <name>.paused   a member stopped mid-write (PAUSE_AT > 0: the test SIGKILLs it now);
//   <name>.json     a member's result.
// Usage: weights_fabric_push_node cache  DIR BIND PROVIDER PUT_TIMEOUT_MS
//        weights_fabric_push_node member DIR NAME CACHE PROVIDER BYTES SEED SHARD NUM_SHARDS
//                                        PAUSE_AT
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "store/digest.h"
#include "weights/cache_client.h"
#include "weights/cache_server.h"
#include "weights/fabric_push.h"
#include "weights/version_cache.h"
#include "zmq/context.h"

namespace {

namespace fs = std::filesystem;
using namespace moerl;
using nlohmann::json;

constexpr uint64_t kVersion = 5;
constexpr uint64_t kChunk = 256 << 10;
constexpr int kTimeoutMs = 5000;

fabric::transport_options options_for(const std::string& provider) {
  fabric::transport_options o;
  o.provider = provider;
  o.require_provider = provider != "auto";
  return o;
}

void write_file(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.string() + ".tmp";
  std::ofstream(tmp) << text;
  fs::rename(tmp, p);  // whole or absent for the test
}

int run_cache(const fs::path& dir, const std::string& bind, const std::string& provider,
              int64_t put_timeout_ms) {
  auto ctx = *zmq::zmq_context::create();
  auto cache = std::make_shared<weights::version_cache>(8, uint64_t(1) << 31);
  auto server = weights::cache_server::bind(ctx, bind, cache, kChunk);
  if (!server) {
    std::cerr << "bind: " << server.err().to_string() << "\n";
    return 2;
  }
  (*server)->enable_fabric_puts(options_for(provider), put_timeout_ms);
  write_file(dir / "cache.ready", (*server)->endpoint());
  while (!fs::exists(dir / "stop")) {
    if (auto st = (*server)->poll(20); !st) {
      std::cerr << "poll: " << st.err().to_string() << "\n";
      return 2;
    }
  }
  json held = json::object();
  for (uint64_t v : cache->versions())
    for (uint32_t s = 0; s < 64; ++s)
      if (auto cv = cache->find(v, s); cv)
        held[std::to_string(v) + "/" + std::to_string(s)] = (*cv)->content_hash;
  write_file(dir / "cache.json", json{{"counters", (*server)->counters().to_json()},
                                      {"held", held},
                                      {"provider", (*server)->fabric_provider()}}
                                     .dump());
  return 0;
}

std::string shard_bytes(uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

int run_member(const fs::path& dir, const std::string& name, const std::string& cache_ep,
               const std::string& provider, uint64_t bytes, uint64_t seed, weights::shard_tag tag,
               uint64_t pause_at) {
  const std::string data = shard_bytes(bytes, seed);
  const std::string sha = store::sha256_hex(data);
  auto ctx = *zmq::zmq_context::create();
  auto client = weights::cache_client::connect(ctx, cache_ep, kTimeoutMs);
  json out{{"content_hash", sha}};
  if (!client) {
    out["error"] = client.err().to_string();
    write_file(dir / (name + ".json"), out.dump());
    return 1;
  }
  weights::fabric_pusher pusher(options_for(provider), kTimeoutMs);
  if (pause_at > 0) {
    // Half a put: the region granted and partly written, then the test kills us.
    auto g = pusher.begin(**client, kVersion, data.size(), tag);
    auto w = g ? pusher.write(*g, data, 0, std::min<uint64_t>(pause_at, data.size()))
               : result<uint64_t>(g.err());
    if (!w) {
      out["error"] = w.err().to_string();
      write_file(dir / (name + ".json"), out.dump());
      return 1;
    }
    write_file(dir / (name + ".paused"), pusher.last_path());
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto st = pusher.push(**client, kVersion, data, sha, tag);
  out["ok"] = static_cast<bool>(st);
  out["path"] = pusher.last_path();
  out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st) out["error"] = st.err().to_string();
  if (const auto* d = pusher.describe()) out["provider"] = d->provider;
  write_file(dir / (name + ".json"), out.dump());
  return st ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 5 && a[0] == "cache") return run_cache(a[1], a[2], a[3], std::stoll(a[4]));
  if (a.size() == 10 && a[0] == "member") {
    weights::shard_tag tag;
    tag.shard = static_cast<uint32_t>(std::stoul(a[7]));
    tag.num_shards = static_cast<uint32_t>(std::stoul(a[8]));
    return run_member(a[1], a[2], a[3], a[4], std::stoull(a[5]), std::stoull(a[6]), tag,
                      std::stoull(a[9]));
  }
  std::cerr << "usage: weights_fabric_push_node cache DIR BIND PROVIDER PUT_TIMEOUT_MS\n"
               "       weights_fabric_push_node member DIR NAME CACHE PROVIDER BYTES SEED SHARD "
               "NUM_SHARDS PAUSE_AT\n";
  return 2;
}
