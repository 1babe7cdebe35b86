// Fan-out between "hosts" (issue 27): a checkpoint cache and 1, 4 or 16 reader processes,
// each in its own network namespace, joined by a bridge in a namespace of their own (so
// nothing on the real host changes and no address can clash with another run's). The
// readers read one version through the fan-out tree (weights/FANOUT.md) over tcp. With 4
// and 16 readers an inner node of the tree stops mid-transfer and is SIGKILLed: its
// children must resume from another holder. Every surviving reader must end with the
// version's exact hash, and peers must have served bytes to peers. Needs root for the
// namespaces: skipped (with the reason) elsewhere, as tests/sims' namespace tests are.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/child_process.h"
#include "sims/netns_link.h"
#include "sims/netns_switch.h"
#include "store/digest.h"
#include "tests/support/node_files.h"
#include "weights/fanout_plan.h"

#ifndef MOERL_FANOUT_NODE
#error "MOERL_FANOUT_NODE must name the weights_fanout_node binary (tests/weights/CMakeLists.txt)"
#endif

namespace moerl::weights {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kBytes = 8 << 20;
constexpr uint64_t kChunk = 128 << 10;  // 64 chunks: room to stop a reader half way
constexpr uint64_t kSeed = 27;
constexpr int kDegree = 2;
constexpr int kPort = 5555;  // every host has its own address: one port for all
constexpr auto kWait = std::chrono::seconds(90);

// Host 0 holds the cache, hosts 1..n the readers (sims/netns_switch.h).
std::string host_address(int host) { return sims::netns_switch::address(host); }
std::string endpoint_of(int host) {
  return "tcp://" + host_address(host) + ":" + std::to_string(kPort);
}

std::string expected_hash() {
  std::mt19937_64 rng(kSeed);
  std::string s(kBytes, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return store::sha256_hex(s);
}

bool wait_file(const fs::path& p) { return testing::wait_file(p, kWait); }

void fan_out(int num_readers) {
  const std::string why = sims::netns_link::unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "network namespaces unavailable: " << why;
  auto made = sims::netns_switch::create(num_readers + 1);
  ASSERT_TRUE(made) << made.err().to_string();
  const sims::netns_switch& net = **made;
  const fs::path dir = fs::temp_directory_path() / ("moerl-fanout-" + std::to_string(::getpid()) +
                                                    "-" + std::to_string(num_readers));
  fs::remove_all(dir);
  fs::create_directories(dir);

  std::vector<std::string> readers;
  for (int r = 0; r < num_readers; ++r) readers.push_back(endpoint_of(r + 1));
  std::vector<std::string> sorted = readers;
  std::sort(sorted.begin(), sorted.end());
  // The victim: the second reader of the tree (an inner node once there are 4 readers), so
  // its children must resume elsewhere. None with one reader: it would have no survivor.
  const std::string victim = num_readers >= 4 ? sorted[1] : std::string();
  std::vector<std::string> orphans;
  for (size_t i = 0; i < sorted.size(); ++i)
    if (!victim.empty() && fanout_parent(int(i), kDegree) == 1) orphans.push_back(sorted[i]);

  std::vector<pid_t> pids;
  auto start = [&](int host, std::vector<std::string> args, const std::string& name) {
    process_spec spec;
    spec.argv = {MOERL_FANOUT_NODE};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    auto pid = spawn_process(spec, net.exec_prefix(host), (dir / (name + ".log")).string());
    EXPECT_TRUE(pid) << pid.err().to_string();
    if (pid) pids.push_back(*pid);
  };
  std::string readers_arg;
  for (const auto& r : readers) readers_arg += (readers_arg.empty() ? "" : ",") + r;
  start(0,
        {"cache", dir.string(), "cache", endpoint_of(0), std::to_string(kBytes),
         std::to_string(kSeed), std::to_string(kChunk)},
        "cache");
  for (int r = 0; r < num_readers; ++r) {
    const bool is_victim = readers[r] == victim;
    start(
        r + 1,
        {"reader", dir.string(), "reader-" + std::to_string(r),
         "tcp://" + host_address(r + 1) + ":" + std::to_string(kPort), endpoint_of(0), readers_arg,
         std::to_string(kDegree), std::to_string(is_victim ? kBytes / kChunk / 2 : 0)},
        "reader-" + std::to_string(r));
  }
  const auto stop_all = [&] {
    std::ofstream(dir / "stop") << "";
    for (pid_t p : pids)
      if (!wait_exit(p, 10000)) {
        (void)send_signal(p, SIGKILL);
        (void)wait_exit(p, 5000);
      }
  };
  bool ready = wait_file(dir / "cache.ready");
  for (int r = 0; r < num_readers && ready; ++r)
    ready = wait_file(dir / ("reader-" + std::to_string(r) + ".ready"));
  if (!ready) {
    stop_all();
    FAIL() << "a node did not start; logs in " << dir;
  }
  std::ofstream(dir / "go") << "";

  int victim_index = -1;
  for (int r = 0; r < num_readers; ++r)
    if (readers[r] == victim) victim_index = r;
  if (victim_index >= 0) {
    const std::string name = "reader-" + std::to_string(victim_index);
    EXPECT_TRUE(wait_file(dir / (name + ".paused"))) << "the victim never got half way";
    EXPECT_TRUE(send_signal(pids[1 + victim_index], SIGKILL));
    EXPECT_TRUE(wait_exit(pids[1 + victim_index], 10000));
  }
  for (int r = 0; r < num_readers; ++r) {
    if (r == victim_index) continue;
    EXPECT_TRUE(wait_file(dir / ("reader-" + std::to_string(r) + ".json")))
        << "reader " << r << " never finished; logs in " << dir;
  }
  stop_all();  // the final results carry what each served until the end

  const std::string want = expected_hash();
  uint64_t peer_read = 0, peer_served = 0;
  for (int r = 0; r < num_readers; ++r) {
    if (r == victim_index) continue;
    const json j = testing::read_json_file(dir / ("reader-" + std::to_string(r) + ".json"));
    ASSERT_TRUE(j.is_object()) << "reader " << r;
    EXPECT_TRUE(j.value("ok", false)) << "reader " << r << ": " << j.dump();
    EXPECT_EQ(j.value("content_hash", ""), want) << "reader " << r;
    const json& from = j["reader"]["bytes_from"];
    std::cout << readers[r] << (readers[r] == sorted[0] ? " (root)" : "") << ": read "
              << from.dump() << ", failovers " << j["reader"].value("failovers", 0) << ", served "
              << j["served"].value("bytes_served", uint64_t{0}) << "\n";
    EXPECT_EQ(from.value("cache", uint64_t{0}) + from.value("peer", uint64_t{0}), kBytes)
        << "reader " << r << " read more or less than the version: " << j.dump();
    peer_read += from.value("peer", uint64_t{0});
    peer_served += j["served"].value("bytes_served", uint64_t{0});
    if (std::find(orphans.begin(), orphans.end(), readers[r]) != orphans.end()) {
      EXPECT_GE(j["reader"].value("failovers", 0), 1)
          << "reader " << r << " lost its parent mid-transfer but never resumed elsewhere";
    }
  }
  if (num_readers == 1) {
    EXPECT_EQ(peer_read, 0u);  // the root reads the cache
  } else {
    EXPECT_GT(peer_read, 0u);
    EXPECT_GT(peer_served, 0u);
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

TEST(weights_fanout_netns, one_reader_reads_the_cache) { fan_out(1); }
TEST(weights_fanout_netns, four_readers_survive_an_inner_reader_killed_mid_transfer) { fan_out(4); }
TEST(weights_fanout_netns, sixteen_readers_survive_an_inner_reader_killed_mid_transfer) {
  fan_out(16);
}

}  // namespace
}  // namespace moerl::weights
