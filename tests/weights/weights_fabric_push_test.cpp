// Fabric puts (weights/PROTOCOL.md "Fabric puts", issue 27): a version lands in a cache's
// registered region (stores into its memfd on the same host, RMA writes over tcp;ofi_rxm
// from another network namespace) and is held only after put_commit's sha256 matches; a
// wrong hash is refused and frees the region; a member killed mid-write leaves the cache
// serving and its region freed after the put timeout; a pusher whose fabric put fails falls
// back to the ZeroMQ put. The namespace test needs root (skipped with the reason elsewhere).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/child_process.h"
#include "sims/netns_link.h"
#include "sims/netns_switch.h"
#include "store/digest.h"
#include "tests/support/node_files.h"
#include "tests/support/served_cache.h"
#include "weights/cache_client.h"
#include "weights/cache_server.h"
#include "weights/fabric_push.h"
#include "weights/wire.h"

#ifndef MOERL_FABRIC_PUSH_NODE
#error "MOERL_FABRIC_PUSH_NODE must name the weights_fabric_push_node binary"
#endif

namespace moerl::weights {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kChunk = 256 << 10;
constexpr int kTimeoutMs = 5000;
constexpr int64_t kPutTimeoutMs = 1500;  // a killed member's region is freed after this
constexpr auto kWait = std::chrono::seconds(20);

fabric::transport_options tcp_or_auto(bool tcp) {
  fabric::transport_options o;
  o.provider = tcp ? "tcp;ofi_rxm" : "auto";
  o.require_provider = tcp;
  return o;
}

// A cache served from a thread of this process. Its counters are the server thread's plain
// fields: that thread copies them after every poll, under a mutex, for the test to read.
struct running_cache {
  std::shared_ptr<zmq::zmq_context> ctx = *zmq::zmq_context::create();
  std::shared_ptr<version_cache> cache = std::make_shared<version_cache>(8, uint64_t(1) << 30);
  std::unique_ptr<cache_server> server;
  std::atomic<bool> stop{false};
  mutable std::mutex counters_mu;
  server_counters counters_seen;
  std::thread thread;

  explicit running_cache(bool fabric) {
    auto s = cache_server::bind(ctx, "tcp://127.0.0.1:*", cache, kChunk);
    EXPECT_TRUE(s) << s.err().to_string();
    server = std::move(*s);
    if (fabric) server->enable_fabric_puts(tcp_or_auto(false), kPutTimeoutMs);
    thread = std::thread([this] {
      while (!stop) {
        ASSERT_TRUE(server->poll(10));
        std::lock_guard<std::mutex> lock(counters_mu);
        counters_seen = server->counters();
      }
    });
  }
  ~running_cache() {
    stop = true;
    thread.join();
  }
  // As of the server thread's last poll.
  server_counters counters() const {
    std::lock_guard<std::mutex> lock(counters_mu);
    return counters_seen;
  }
};

std::unique_ptr<cache_client> client_of(const running_cache& c) {
  auto cl = cache_client::connect(c.ctx, c.server->endpoint(), kTimeoutMs);
  EXPECT_TRUE(cl) << cl.err().to_string();
  return std::move(*cl);
}

bool wait_for(const std::function<bool()>& cond) { return testing::wait_until(cond, kWait); }

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("moerl-fabric-push-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(weights_fabric_push, a_put_in_one_process_is_held_as_a_zeromq_put_would_be) {
  running_cache c(true);
  auto cl = client_of(c);
  const std::string bytes = testing::random_bytes(3 * kChunk + 17, 1);
  fabric_pusher pusher(tcp_or_auto(false), kTimeoutMs);
  ASSERT_TRUE(pusher.push(*cl, 4, bytes, store::sha256_hex(bytes), shard_tag{1, 2, ""}));
  EXPECT_EQ(pusher.last_path(), "same_process");
  auto meta = cl->call(wire::kMeta, json{{"version", 4}, {"shard", 1}});
  ASSERT_TRUE(meta) << meta.err().to_string();
  EXPECT_EQ(meta->header["content_hash"], store::sha256_hex(bytes));
  EXPECT_EQ(meta->header["num_shards"], 2);
  EXPECT_EQ(meta->header["num_chunks"], 4);
  // Pushed again: already held, nothing written.
  ASSERT_TRUE(pusher.push(*cl, 4, bytes, store::sha256_hex(bytes), shard_tag{1, 2, ""}));
  // The counters as of a poll after the put (the snapshot may be older than our answer).
  EXPECT_TRUE(wait_for([&] { return c.counters().num_fabric_puts == 1; }));
  EXPECT_EQ(c.counters().fabric_regions, 0u);
}

TEST(weights_fabric_push, a_wrong_commit_hash_is_refused_and_frees_the_region) {
  running_cache c(true);
  auto cl = client_of(c);
  const std::string bytes = testing::random_bytes(2 * kChunk, 2);
  fabric_pusher pusher(tcp_or_auto(false), kTimeoutMs);
  auto g = pusher.begin(*cl, 6, bytes.size(), {});
  ASSERT_TRUE(g) << g.err().to_string();
  auto w = pusher.write(*g, bytes, 0, bytes.size());
  ASSERT_TRUE(w) << w.err().to_string();
  auto st = pusher.commit(*cl, *g, 6, store::sha256_hex("not these bytes"), {}, *w);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code, errc::invalid_argument);
  EXPECT_NE(st.err().message.find("does not match its content hash"), std::string::npos)
      << st.err().message;
  EXPECT_FALSE(c.cache->find(6));
  EXPECT_TRUE(wait_for([&] { return c.counters().num_fabric_puts_failed == 1; }));
  EXPECT_EQ(c.counters().fabric_regions, 0u);
  // The ticket is spent: committing it again names it as not in progress.
  auto again = pusher.commit(*cl, *g, 6, store::sha256_hex(bytes), {}, *w);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.err().code, errc::not_found);
  // A commit naming a size the cache would not hold, and a region the cache cannot give.
  auto huge = cl->call(wire::kPutBegin, json{{"version", 7}, {"total_bytes", uint64_t(1) << 40}});
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.err().code, errc::capacity_exceeded);
}

TEST(weights_fabric_push, a_cache_without_fabric_puts_gets_the_zeromq_put) {
  running_cache c(false);
  const std::string bytes = testing::random_bytes(kChunk + 5, 3);
  fabric_pusher pusher(tcp_or_auto(false), kTimeoutMs);
  cache_connections to(c.ctx, kTimeoutMs);
  auto where = push_to_a_cache(to, {c.server->endpoint()}, 9, bytes, store::sha256_hex(bytes),
                               kChunk, {}, &pusher);
  ASSERT_TRUE(where) << where.err().to_string();
  auto held = c.cache->find(9);
  ASSERT_TRUE(held);
  EXPECT_EQ((*held)->content_hash, store::sha256_hex(bytes));
  EXPECT_TRUE(wait_for([&] { return c.counters().num_versions_put == 1; }));
  EXPECT_EQ(c.counters().num_fabric_puts, 0u);
  EXPECT_EQ(pusher.num_failed(), 1u);
  EXPECT_EQ(pusher.num_pushed(), 0u);
}

// A member process on this host: its stores land in the cache's memfd; a second member
// SIGKILLed half way leaves a region that the put timeout frees, the cache serving throughout.
TEST(weights_fabric_push, members_on_this_host_and_one_killed_mid_write) {
  running_cache c(true);
  const fs::path dir = fresh_dir("host");
  const uint64_t bytes = 4 << 20;
  auto member = [&](const std::string& name, uint64_t seed, int shard, uint64_t pause_at) {
    process_spec spec;
    spec.argv = {MOERL_FABRIC_PUSH_NODE,
                 "member",
                 dir.string(),
                 name,
                 c.server->endpoint(),
                 "auto",
                 std::to_string(bytes),
                 std::to_string(seed),
                 std::to_string(shard),
                 "2",
                 std::to_string(pause_at)};
    auto pid = spawn_process(spec, {}, (dir / (name + ".log")).string());
    EXPECT_TRUE(pid) << pid.err().to_string();
    return pid ? *pid : pid_t(-1);
  };
  const pid_t victim = member("victim", 11, 1, bytes / 2);
  ASSERT_TRUE(wait_for([&] { return fs::exists(dir / "victim.paused"); }))
      << "the victim never got half way; logs in " << dir;
  EXPECT_TRUE(wait_for([&] { return c.counters().fabric_regions == 1; }));
  ASSERT_TRUE(send_signal(victim, SIGKILL));
  ASSERT_TRUE(wait_exit(victim, 10000));
  const pid_t ok = member("ok", 10, 0, 0);
  ASSERT_TRUE(wait_for([&] { return fs::exists(dir / "ok.json"); })) << "logs in " << dir;
  EXPECT_TRUE(wait_exit(ok, 10000));
  const json r = testing::read_json_file(dir / "ok.json");
  EXPECT_TRUE(r.value("ok", false)) << r.dump();
  EXPECT_EQ(r.value("path", ""), "same_host");
  auto held = c.cache->find(5, 0);
  ASSERT_TRUE(held);
  EXPECT_EQ((*held)->content_hash, r.value("content_hash", ""));
  // The victim's region goes after the put timeout; the cache answered all along.
  ASSERT_TRUE(wait_for([&] { return c.counters().fabric_regions == 0; }));
  EXPECT_EQ(c.counters().num_fabric_puts_failed, 1u);
  EXPECT_FALSE(c.cache->find(5, 1));
  auto cl = client_of(c);
  EXPECT_TRUE(cl->call(wire::kLoad, json::object()));
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// Between "hosts": the cache in one network namespace, two members in others pushing the two
// shards of a version as RMA writes over tcp;ofi_rxm, a third killed mid-write.
TEST(weights_fabric_push, members_on_other_hosts_write_over_tcp) {
  const std::string why = sims::netns_link::unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "network namespaces unavailable: " << why;
  auto made = sims::netns_switch::create(4);
  ASSERT_TRUE(made) << made.err().to_string();
  const sims::netns_switch& net = **made;
  const fs::path dir = fresh_dir("netns");
  const std::string cache_ep = "tcp://" + sims::netns_switch::address(0) + ":5556";
  const uint64_t bytes = 8 << 20;
  std::vector<pid_t> pids;
  auto start = [&](int host, std::vector<std::string> args, const std::string& name) {
    process_spec spec;
    spec.argv = {MOERL_FABRIC_PUSH_NODE};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    auto pid = spawn_process(spec, net.exec_prefix(host), (dir / (name + ".log")).string());
    EXPECT_TRUE(pid) << pid.err().to_string();
    pids.push_back(pid ? *pid : pid_t(-1));
    return pids.back();
  };
  start(0, {"cache", dir.string(), cache_ep, "tcp;ofi_rxm", std::to_string(kPutTimeoutMs)},
        "cache");
  ASSERT_TRUE(wait_for([&] { return fs::exists(dir / "cache.ready"); })) << "logs in " << dir;
  auto member = [&](int host, const std::string& name, int shard, uint64_t pause_at) {
    return start(host,
                 {"member", dir.string(), name, cache_ep, "tcp;ofi_rxm", std::to_string(bytes),
                  std::to_string(20 + host), std::to_string(shard), "2", std::to_string(pause_at)},
                 name);
  };
  const pid_t victim = member(3, "victim", 1, bytes / 2);
  EXPECT_TRUE(wait_for([&] { return fs::exists(dir / "victim.paused"); })) << "logs in " << dir;
  EXPECT_TRUE(send_signal(victim, SIGKILL));
  member(1, "m0", 0, 0);
  member(2, "m1", 1, 0);
  for (const char* m : {"m0", "m1"})
    EXPECT_TRUE(wait_for([&] { return fs::exists(dir / (std::string(m) + ".json")); }))
        << m << " never finished; logs in " << dir;
  // Past the put timeout the victim's region is freed; then the cache reports.
  std::this_thread::sleep_for(std::chrono::milliseconds(kPutTimeoutMs + 500));
  std::ofstream(dir / "stop") << "";
  EXPECT_TRUE(wait_for([&] { return fs::exists(dir / "cache.json"); }));
  for (pid_t p : pids)
    if (!wait_exit(p, 5000)) {
      (void)send_signal(p, SIGKILL);
      (void)wait_exit(p, 5000);
    }
  const json cache = testing::read_json_file(dir / "cache.json");
  ASSERT_TRUE(cache.is_object()) << "logs in " << dir;
  EXPECT_EQ(cache.value("provider", ""), "tcp;ofi_rxm");
  for (int s = 0; s < 2; ++s) {
    const json r = testing::read_json_file(dir / ("m" + std::to_string(s) + ".json"));
    ASSERT_TRUE(r.is_object());
    EXPECT_TRUE(r.value("ok", false)) << r.dump();
    EXPECT_EQ(r.value("path", ""), "network") << r.dump();
    EXPECT_EQ(cache["held"].value("5/" + std::to_string(s), ""), r.value("content_hash", ""))
        << cache.dump();
  }
  EXPECT_EQ(cache["counters"].value("fabric_puts", 0), 2);
  EXPECT_EQ(cache["counters"].value("fabric_puts_failed", 0), 1);
  EXPECT_EQ(cache["counters"].value("fabric_regions", 1), 0);
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace moerl::weights
