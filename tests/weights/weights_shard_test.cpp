// Sharded versions on the weight plane (weights/PROTOCOL.md, "Sharded versions"): the cache
// keys entries by (version, shard) and bounds versions, not shards; pushers put shards with
// `shard`/`num_shards`; a reader fetches every shard (in parallel, from the caches holding
// them), checks each against its sha256 and hands the shards to an assembler. A shard whose
// copy does not match its hash is read from another cache or never used; a shard in no cache
// means the version does not come from the caches at all.
#include <gtest/gtest.h>

#include "store/digest.h"
#include "tests/support/served_cache.h"
#include "weights/cache_client.h"
#include "weights/cache_server.h"
#include "weights/version_cache.h"
#include "weights/version_reader.h"
#include "weights/wire.h"

namespace moerl::weights {
namespace {

using nlohmann::json;

constexpr uint64_t kChunk = 16 * 1024;

using testing::random_bytes;
using testing::served_cache;
using testing::zmq_ctx;

cached_version shard_entry(uint64_t v, uint32_t shard, uint32_t n, std::string bytes) {
  auto cv = make_cached_version(v, std::make_shared<std::string>(std::move(bytes)), kChunk);
  cv.shard = shard;
  cv.num_shards = n;
  return cv;
}

// The test's assembler: the shards back to back (the job's assembles parameter shares).
result<std::string> concatenate(const std::vector<fetched_shard>& shards, const std::string&) {
  std::string out;
  for (const auto& s : shards) out += *s.bytes;
  return out;
}

TEST(version_cache_shards, BoundsCountVersionsAndEvictAVersionsShardsTogether) {
  version_cache c(2, 1 << 20);
  for (uint64_t v : {1, 2})
    for (uint32_t k = 0; k < 3; ++k)
      ASSERT_TRUE(c.insert(shard_entry(v, k, 3, random_bytes(100, v * 10 + k))));
  EXPECT_EQ(c.versions(), (std::vector<uint64_t>{1, 2}));  // six entries, two versions
  EXPECT_TRUE(c.complete(1));
  EXPECT_TRUE(c.complete(2));
  ASSERT_TRUE(c.insert(shard_entry(3, 1, 3, random_bytes(100, 31))));
  EXPECT_EQ(c.versions(), (std::vector<uint64_t>{2, 3}));  // version 1 went, all three shards
  EXPECT_EQ(c.num_bytes(), 400u);
  EXPECT_FALSE(c.complete(3));
  EXPECT_TRUE(c.find(2, 2));
  auto gone = c.find(1, 0);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.err().code, errc::not_found);
  auto missing = c.find(3, 0);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.err().message.find("version 3"), std::string::npos) << missing.err().message;
}

// Three shards of version 5 over two caches (what members pushing to their least-loaded cache
// leave): shard 0's meta names the shard count and the assembled version's hash; the reader
// reads the three and the assembler gets them in shard order.
TEST(sharded_versions, AReaderFetchesEveryShardAndAssemblesThem) {
  auto ctx = zmq_ctx();
  served_cache a(ctx, kChunk), b(ctx, kChunk);
  std::vector<std::string> shards;
  for (uint32_t k = 0; k < 3; ++k) shards.push_back(random_bytes(5 * kChunk + 7 * k, 50 + k));
  for (uint32_t k = 0; k < 3; ++k) {
    auto c = cache_client::connect(ctx, k == 1 ? b.endpoint() : a.endpoint(), 2000);
    ASSERT_TRUE(c);
    ASSERT_TRUE(push_version(**c, 5, shards[k], store::sha256_hex(shards[k]), kChunk,
                             shard_tag{k, 3, k == 0 ? "whole-hash" : ""}));
  }
  EXPECT_EQ(a.cache().versions(), (std::vector<uint64_t>{5}));
  EXPECT_FALSE(a.cache().complete(5));  // shards 0 and 2 only
  auto c = cache_client::connect(ctx, a.endpoint(), 2000);
  ASSERT_TRUE(c);
  auto meta = (*c)->call(wire::kMeta, json{{"version", 5}});
  ASSERT_TRUE(meta) << meta.err().to_string();
  EXPECT_EQ(meta->header.value("num_shards", 0), 3);
  EXPECT_EQ(meta->header.value("version_hash", std::string()), "whole-hash");
  auto meta2 = (*c)->call(wire::kMeta, json{{"version", 5}, {"shard", 2}});
  ASSERT_TRUE(meta2) << meta2.err().to_string();
  EXPECT_EQ(meta2->header.value("content_hash", std::string()), store::sha256_hex(shards[2]));
  auto not_here = (*c)->call(wire::kMeta, json{{"version", 5}, {"shard", 1}});
  ASSERT_FALSE(not_here);
  EXPECT_EQ(not_here.err().code, errc::not_found);

  version_reader reader(ctx, 2000);
  std::string seen_hash;
  reader.set_assembler([&](const std::vector<fetched_shard>& s, const std::string& hash) {
    seen_hash = hash;
    return concatenate(s, hash);
  });
  auto got = reader.fetch(5, {a.endpoint(), b.endpoint()}, nullptr);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, shards[0] + shards[1] + shards[2]);
  EXPECT_EQ(seen_hash, "whole-hash");
  EXPECT_EQ(reader.counters().num_sharded_versions, 1u);
  EXPECT_EQ(reader.counters().num_shards_read, 3u);
  EXPECT_EQ(reader.counters().bytes_from_cache,
            shards[0].size() + shards[1].size() + shards[2].size());

  // A reader that cannot assemble never hands out shard 0 as the version: the store's copy.
  version_reader plain(ctx, 2000);
  auto via_store = plain.fetch(5, {a.endpoint(), b.endpoint()},
                               []() -> result<std::string> { return std::string("store copy"); });
  ASSERT_TRUE(via_store) << via_store.err().to_string();
  EXPECT_EQ(*via_store->bytes, "store copy");
  EXPECT_EQ(plain.counters().num_store_fallbacks, 1u);
}

// On the cache's host every shard comes through its own sealed memfd (weights/shm_copy.h).
TEST(sharded_versions, AReaderOnTheCachesHostReadsEachShardThroughItsFile) {
  auto ctx = zmq_ctx();
  served_cache a(ctx, kChunk, ~0ull, /*same_host_shm=*/true);
  std::string whole;
  for (uint32_t k = 0; k < 3; ++k) {
    const std::string bytes = random_bytes(2 * kChunk + k, 80 + k);
    whole += bytes;
    ASSERT_TRUE(a.cache().insert(shard_entry(4, k, 3, bytes)));
  }
  version_reader reader(ctx, 2000, /*same_host_shm=*/true);
  reader.set_assembler(concatenate);
  auto got = reader.fetch(4, {a.endpoint()}, nullptr);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, whole);
  EXPECT_EQ(reader.counters().bytes_via_shm, whole.size());
  EXPECT_EQ(reader.counters().bytes_via_sealed_shm, whole.size());
  EXPECT_EQ(reader.counters().bytes_from_cache, whole.size());
}

TEST(sharded_versions, ACacheCopyOfAShardThatDoesNotMatchItsHashIsNeverUsed) {
  auto ctx = zmq_ctx();
  served_cache bad(ctx, kChunk), good(ctx, kChunk);
  const std::string s0 = random_bytes(3 * kChunk, 60), s1 = random_bytes(3 * kChunk, 61);
  ASSERT_TRUE(bad.cache().insert(shard_entry(7, 0, 2, s0)));
  // The bad cache's shard 1: every chunk matches its chunk hash, the whole does not match the
  // sha256 the pusher named (a cache that corrupted it while holding it).
  auto corrupt = shard_entry(7, 1, 2, random_bytes(3 * kChunk, 62));
  corrupt.content_hash = store::sha256_hex(s1);
  ASSERT_TRUE(bad.cache().insert(std::move(corrupt)));
  ASSERT_TRUE(good.cache().insert(shard_entry(7, 1, 2, s1)));

  version_reader reader(ctx, 2000);
  reader.set_assembler(concatenate);
  auto got = reader.fetch(7, {bad.endpoint(), good.endpoint()}, nullptr);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, s0 + s1);  // shard 1 read again, from the good cache

  // With the bad copy alone, the version never comes from the caches.
  version_reader alone(ctx, 2000);
  alone.set_assembler(concatenate);
  auto refused = alone.fetch_shards(7, {bad.endpoint()});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.err().code, errc::not_found);
  EXPECT_NE(refused.err().message.find("shard 1"), std::string::npos) << refused.err().message;
  auto fallback = alone.fetch(7, {bad.endpoint()}, nullptr);
  EXPECT_FALSE(fallback);
}

TEST(sharded_versions, AShardInNoCacheKeepsTheVersionOffTheCaches) {
  auto ctx = zmq_ctx();
  served_cache a(ctx, kChunk);
  for (uint32_t k : {0u, 1u, 3u})
    ASSERT_TRUE(a.cache().insert(shard_entry(9, k, 4, random_bytes(kChunk, k))));
  version_reader reader(ctx, 2000);
  reader.set_assembler(concatenate);
  auto got = reader.fetch_shards(9, {a.endpoint()});
  ASSERT_FALSE(got);
  EXPECT_EQ(got.err().code, errc::not_found);
  EXPECT_NE(got.err().message.find("version 9 shard 2"), std::string::npos) << got.err().message;
  auto from_store = reader.fetch(9, {a.endpoint()},
                                 []() -> result<std::string> { return std::string("durable"); });
  ASSERT_TRUE(from_store) << from_store.err().to_string();
  EXPECT_EQ(from_store->source, "store");
}

TEST(sharded_versions, BadShardPutsAreRefusedByName) {
  auto ctx = zmq_ctx();
  served_cache a(ctx, kChunk);
  auto c = cache_client::connect(ctx, a.endpoint(), 2000);
  ASSERT_TRUE(c);
  const std::string bytes = random_bytes(kChunk, 70);
  const std::string sha = store::sha256_hex(bytes);
  json put{{"version", 3},        {"offset", 0},       {"total_bytes", bytes.size()},
           {"content_hash", sha}, {"chunk_hash", sha}, {"shard", 2},
           {"num_shards", 2}};
  auto outside = (*c)->call(wire::kPut, put, bytes);
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.err().code, errc::invalid_argument);
  EXPECT_NE(outside.err().message.find("shard 2 is outside a version of 2 shards"),
            std::string::npos)
      << outside.err().message;
  put["num_shards"] = 0;
  auto zero = (*c)->call(wire::kPut, put, bytes);
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.err().message.find("num_shards 0"), std::string::npos) << zero.err().message;
  put["num_shards"] = 3;
  put.erase("shard");
  put["shard"] = "one";
  auto mistyped = (*c)->call(wire::kPut, put, bytes);
  ASSERT_FALSE(mistyped);
  EXPECT_NE(mistyped.err().message.find("'shard'"), std::string::npos) << mistyped.err().message;
  // A shard whose bytes do not match the content hash its pusher named never enters.
  std::string wrong = bytes;
  wrong[5] ^= 1;
  auto st = push_version(**c, 3, wrong, sha, kChunk, shard_tag{1, 3, ""});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code, errc::invalid_argument);
  EXPECT_NE(st.err().message.find("shard 1"), std::string::npos) << st.err().message;
  EXPECT_TRUE(a.cache().versions().empty());
}

}  // namespace
}  // namespace moerl::weights
