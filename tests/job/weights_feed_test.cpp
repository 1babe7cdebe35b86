// The rollout node's feed (job/weights_feed.h) against a real checkpoint cache on loopback and
// a real local store: it prefetches each announced version from the cache, falls back to the
// store for a version no cache holds, and without caches reads the store and still records
// when each version arrived (the report's redistribution and time-to-productive figures).
#include "job/weights_feed.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/config.h"
#include "store/digest.h"
#include "store/object_store.h"
#include "tests/support/served_cache.h"
#include "tests/support/temp_dir.h"
#include "weights/cache_client.h"

namespace moerl::job {
namespace {

constexpr uint64_t kChunk = 32 * 1024;

using testing::random_bytes;
using testing::zmq_ctx;

void push(const std::shared_ptr<zmq::zmq_context>& ctx, const std::string& endpoint,
          uint64_t version, const std::string& bytes) {
  auto c = weights::cache_client::connect(ctx, endpoint, 2000);
  ASSERT_TRUE(c) << c.err().to_string();
  ASSERT_TRUE(weights::push_version(**c, version, bytes, store::sha256_hex(bytes), kChunk));
}

// A store holding versions under "weights/vN" and a reader of them that counts its calls.
struct store_fixture {
  testing::temp_dir dir{"weights-feed"};
  std::unique_ptr<store::object_store> s;
  std::atomic<int> num_reads{0};
  store_fixture() {
    auto opened = store::open_store(dir.path(), config::defaults());
    EXPECT_TRUE(opened) << opened.err().to_string();
    s = std::move(*opened);
  }
  std::function<result<std::string>(uint64_t)> reader() {
    return [this](uint64_t v) {
      ++num_reads;
      return s->get("weights/v" + std::to_string(v));
    };
  }
};

// Waits (bounded, so a broken feed fails rather than hangs) until the feed's stats show
// `version` held.
bool wait_held(const weights_feed& feed, uint64_t version) {
  for (int i = 0; i < 1500; ++i) {
    if (feed.stats()["held_unix_ms"].contains(std::to_string(version))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(weights_feed, PrefetchesEachAnnouncedVersionFromTheCache) {
  auto ctx = zmq_ctx();
  testing::served_cache cache(ctx, kChunk);
  store_fixture store;
  auto dir = std::make_shared<weights::cache_directory>(ctx);
  dir->set_caches({cache.endpoint()});
  weights_feed feed(dir, 2000, false, store.reader());

  const std::string v1 = random_bytes(5 * kChunk + 7, 1), v2 = random_bytes(3 * kChunk, 2);
  push(ctx, cache.endpoint(), 1, v1);
  dir->announce(1);
  ASSERT_TRUE(wait_held(feed, 1));  // fetched in the background, before anyone asked
  push(ctx, cache.endpoint(), 2, v2);
  dir->announce(2);
  ASSERT_TRUE(wait_held(feed, 2));

  auto got1 = feed.get(1), got2 = feed.get(2);
  ASSERT_TRUE(got1) << got1.err().to_string();
  ASSERT_TRUE(got2) << got2.err().to_string();
  EXPECT_EQ(**got1, v1);
  EXPECT_EQ(**got2, v2);
  const auto st = feed.stats();
  EXPECT_EQ(st["bytes_from"]["cache"], v1.size() + v2.size());
  EXPECT_EQ(st["bytes_from"]["store"], 0);
  EXPECT_EQ(st["store_fallbacks"], 0);
  EXPECT_EQ(store.num_reads, 0);
  EXPECT_GT(st["first_weights_unix_ms"].get<int64_t>(), 0);
  EXPECT_LE(st["held_unix_ms"]["1"].get<int64_t>(), st["held_unix_ms"]["2"].get<int64_t>());
  // Per version, what its fetch read from [cache, peer, store].
  EXPECT_EQ(st["held_bytes_from"]["1"], (nlohmann::json{v1.size(), 0, 0}));
  EXPECT_EQ(st["held_bytes_from"]["2"], (nlohmann::json{v2.size(), 0, 0}));
}

TEST(weights_feed, ReadsTheStoreForAVersionNoCacheHolds) {
  auto ctx = zmq_ctx();
  testing::served_cache cache(ctx, kChunk);
  store_fixture store;
  const std::string v3 = random_bytes(2 * kChunk, 3);
  ASSERT_TRUE(store.s->put("weights/v3", v3));
  auto dir = std::make_shared<weights::cache_directory>(ctx);
  dir->set_caches({cache.endpoint()});
  weights_feed feed(dir, 2000, false, store.reader());

  auto got = feed.get(3);  // on demand: never announced, never pushed
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(**got, v3);
  auto again = feed.get(3);  // held now: no second read
  ASSERT_TRUE(again);
  EXPECT_EQ(store.num_reads, 1);
  const auto st = feed.stats();
  EXPECT_EQ(st["bytes_from"]["store"], v3.size());
  EXPECT_EQ(st["store_fallbacks"], 1);
  EXPECT_EQ(st["held_bytes_from"]["3"], (nlohmann::json{0, 0, v3.size()}));

  auto missing = feed.get(9);  // in neither
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.err().code, errc::not_found) << missing.err().to_string();
}

TEST(weights_feed, WithoutCachesReadsTheStoreAndRecordsWhenEachVersionArrived) {
  store_fixture store;
  const std::string v1 = random_bytes(1000, 4);
  ASSERT_TRUE(store.s->put("weights/v1", v1));
  weights_feed feed(nullptr, 2000, false, store.reader());
  EXPECT_FALSE(feed.stats()["held_unix_ms"].contains("1"));  // no prefetch without caches

  auto got = feed.get(1);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(**got, v1);
  const auto st = feed.stats();
  EXPECT_EQ(st["bytes_from"]["store"], v1.size());
  EXPECT_EQ(st["bytes_from"]["cache"], 0);
  EXPECT_EQ(st["store_fallbacks"], 0);  // the store is the path, not a fallback
  EXPECT_EQ(st["versions"], 1);
  EXPECT_TRUE(st["held_unix_ms"].contains("1"));
  EXPECT_GT(st["first_weights_unix_ms"].get<int64_t>(), 0);
}

// weights.fanout: two rollout nodes' feeds, each with its own peer server, both listed as the
// readers present. The first in the sorted list (the root) reads the cache; the other reads
// from it, and the root's server counts what it served.
TEST(weights_feed, WithFanOutOneNodeReadsTheCacheAndTheOtherReadsThatNode) {
  auto ctx = zmq_ctx();
  testing::served_cache cache(ctx, kChunk);
  store_fixture store;
  std::vector<std::shared_ptr<weights::cache_directory>> dirs;
  std::vector<std::shared_ptr<weights::peer_server>> peers;
  std::vector<std::string> readers;
  for (int i = 0; i < 2; ++i) {
    auto p = weights::peer_server::start(ctx, "tcp://127.0.0.1:*", 2, 64 << 20);
    ASSERT_TRUE(p) << p.err().to_string();
    peers.push_back(std::move(*p));
    readers.push_back(peers.back()->endpoint());
  }
  for (int i = 0; i < 2; ++i) {
    auto dir = std::make_shared<weights::cache_directory>(ctx);
    dir->set_caches({cache.endpoint()});
    dir->serve_peers(peers[i], peers[i]->endpoint(), 2);
    dir->set_readers(readers);
    dirs.push_back(dir);
  }
  // Generous timeouts: the non-root waits for the root to start, however loaded the host.
  weights_feed a(dirs[0], 10000, false, store.reader()), b(dirs[1], 10000, false, store.reader());
  const std::string v1 = random_bytes(9 * kChunk + 5, 5);
  push(ctx, cache.endpoint(), 1, v1);
  for (auto& d : dirs) d->announce(1);
  ASSERT_TRUE(wait_held(a, 1));
  ASSERT_TRUE(wait_held(b, 1));
  EXPECT_EQ(**a.get(1), v1);
  EXPECT_EQ(**b.get(1), v1);
  const int root = readers[0] < readers[1] ? 0 : 1;
  const auto root_stats = (root == 0 ? a : b).stats(), leaf_stats = (root == 0 ? b : a).stats();
  EXPECT_EQ(root_stats["bytes_from"]["cache"], v1.size());
  EXPECT_EQ(root_stats["bytes_from"]["peer"], 0);
  EXPECT_EQ(leaf_stats["bytes_from"]["peer"], v1.size());
  EXPECT_EQ(leaf_stats["bytes_from"]["cache"], 0);
  EXPECT_EQ(leaf_stats["held_bytes_from"]["1"], (nlohmann::json{0, v1.size(), 0}));
  EXPECT_EQ(store.num_reads, 0);
  for (int i = 0; i < 200 && peers[root]->counters().bytes_served < v1.size(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // counters follow each poll
  EXPECT_EQ(peers[root]->counters().bytes_served, v1.size());
}

}  // namespace
}  // namespace moerl::job
