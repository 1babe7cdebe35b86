// One "host" of the fan-out test (weights_fanout_netns_test.cpp), run inside its own network
// namespace: either the checkpoint cache holding the version, or a reader that takes part in
// fan-out (weights/fanout_reader.h) and keeps serving its peers after it holds the version.
// It talks to the test through files in --dir (namespaces share the filesystem):
//   <name>.ready   bound and serving;            go       (test) start reading;
//   <name>.paused  stopped mid-transfer (--pause-after: the test SIGKILLs it now);
//   <name>.json    the reader's result;          stop     (test) write the final result, exit.
// Usage: weights_fanout_node cache  DIR NAME BIND BYTES SEED CHUNK_BYTES
//        weights_fanout_node reader DIR NAME BIND CACHE READERS(comma) DEGREE PAUSE_AFTER
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/digest.h"
#include "weights/cache_server.h"
#include "weights/fanout_plan.h"
#include "weights/fanout_reader.h"
#include "weights/peer_server.h"
#include "weights/version_cache.h"
#include "zmq/context.h"

namespace {

namespace fs = std::filesystem;
using namespace moerl;

constexpr uint64_t kVersion = 1;
constexpr int kRequestTimeoutMs = 1000;  // a killed peer is given up on after this
constexpr int kStallMs = 1500;           // a paused peer is given up on after this
constexpr auto kFilePoll = std::chrono::milliseconds(10);

void write_file(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.string() + ".tmp";
  std::ofstream(tmp) << text;
  fs::rename(tmp, p);  // whole or absent: the test never reads half a file
}

void wait_for(const fs::path& p) {
  while (!fs::exists(p)) std::this_thread::sleep_for(kFilePoll);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int run_cache(const fs::path& dir, const std::string& name, const std::string& bind, uint64_t bytes,
              uint64_t seed, uint64_t chunk_bytes) {
  auto ctx = zmq::zmq_context::create();
  if (!ctx) return 2;
  std::mt19937_64 rng(seed);
  auto data = std::make_shared<std::string>(bytes, '\0');
  for (auto& c : *data) c = static_cast<char>(rng());
  auto cache = std::make_shared<weights::version_cache>(2, bytes * 2);
  if (!cache->insert(weights::make_cached_version(kVersion, data, chunk_bytes))) return 2;
  auto server = weights::cache_server::bind(*ctx, bind, cache, chunk_bytes);
  if (!server) {
    std::cerr << "bind " << bind << ": " << server.err().to_string() << "\n";
    return 2;
  }
  write_file(dir / (name + ".ready"), (*server)->endpoint());
  while (!fs::exists(dir / "stop"))
    if (!(*server)->poll(20)) return 3;
  return 0;
}

int run_reader(const fs::path& dir, const std::string& name, const std::string& bind,
               const std::string& cache, const std::vector<std::string>& readers, int degree,
               uint64_t pause_after) {
  auto ctx = zmq::zmq_context::create();
  if (!ctx) return 2;
  std::shared_ptr<weights::peer_server> self;
  {
    auto started = weights::peer_server::start(*ctx, bind, 2, 1ull << 32);
    if (!started) {
      std::cerr << "bind " << bind << ": " << started.err().to_string() << "\n";
      return 2;
    }
    self = std::move(*started);
  }
  weights::fanout_reader reader(*ctx, self, kRequestTimeoutMs, kStallMs);
  if (pause_after > 0)
    reader.on_chunk([&](uint64_t k, uint64_t) {
      if (k + 1 < pause_after) return;
      write_file(dir / (name + ".paused"), std::to_string(k + 1));
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // until SIGKILLed
    });
  write_file(dir / (name + ".ready"), self->endpoint());
  wait_for(dir / "go");
  auto sources = weights::fanout_sources(readers, self->endpoint(), {cache}, degree);
  auto got = reader.fetch(kVersion, sources, nullptr);
  auto result = [&] {
    nlohmann::json j{{"ok", static_cast<bool>(got)},
                     {"reader", reader.counters().to_json()},
                     {"served", self->counters().to_json()}};
    if (got)
      j["content_hash"] = store::sha256_hex(*got->bytes);
    else
      j["error"] = got.err().to_string();
    return j.dump();
  };
  write_file(dir / (name + ".json"), result());
  // Keep serving: peers below this one may still be reading from it.
  wait_for(dir / "stop");
  write_file(dir / (name + ".json"), result());
  return got ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 7 && a[0] == "cache")
    return run_cache(a[1], a[2], a[3], std::stoull(a[4]), std::stoull(a[5]), std::stoull(a[6]));
  if (a.size() == 8 && a[0] == "reader")
    return run_reader(a[1], a[2], a[3], a[4], split(a[5]), std::stoi(a[6]), std::stoull(a[7]));
  std::cerr << "usage: weights_fanout_node cache DIR NAME BIND BYTES SEED CHUNK_BYTES\n"
               "       weights_fanout_node reader DIR NAME BIND CACHE READERS DEGREE PAUSE_AFTER\n";
  return 64;
}
