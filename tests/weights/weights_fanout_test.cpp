// Fan-out's parts in one process on loopback (the namespaces test runs them as processes):
// the tree every reader computes, a reader's server answering bad requests and chunks not
// arrived yet, a child reading a version while its parent still receives it, and a peer
// that serves a corrupt chunk, and a version the caches hold in shards passed on whole.
#include <gtest/gtest.h>

#include <thread>

#include "store/digest.h"
#include "tests/support/served_cache.h"
#include "weights/cache_client.h"
#include "weights/fanout_plan.h"
#include "weights/fanout_reader.h"
#include "weights/peer_server.h"
#include "weights/version_reader.h"
#include "weights/wire.h"

namespace moerl::weights {
namespace {

using nlohmann::json;
using testing::random_bytes;
using testing::served_cache;
using testing::zmq_ctx;

constexpr uint64_t kChunk = 64 * 1024;

std::shared_ptr<peer_server> start_peer(const std::shared_ptr<zmq::zmq_context>& ctx) {
  auto p = peer_server::start(ctx, "tcp://127.0.0.1:*", 2, 64 << 20);
  EXPECT_TRUE(p) << p.err().to_string();
  return std::move(*p);
}

// Puts chunks [from, to) of `bytes` into `a`, each with its true hash.
void put_chunks(arriving_version& a, const std::string& bytes, uint64_t from, uint64_t to) {
  for (uint64_t k = from; k < to; ++k) {
    std::string_view c(bytes.data() + a.chunk_offset(k), a.chunk_size(k));
    ASSERT_TRUE(a.put_chunk(k, c, store::sha256_hex(c)));
  }
}

TEST(fanout_plan, EveryReaderComputesTheSameTreeFromItsOwnOrderOfTheList) {
  const std::vector<std::string> caches = {"c0", "c1"};
  const std::vector<std::string> a = {"r3", "r0", "r4", "r1", "r2", "r1"};  // unsorted, a twin
  const std::vector<std::string> b = {"r0", "r1", "r2", "r3", "r4"};
  for (const auto& self : b)
    EXPECT_EQ(fanout_sources(a, self, caches, 2).size(), fanout_sources(b, self, caches, 2).size());
  // Degree 2: r0 is the root (caches only), r1 and r2 read r0, r3 and r4 read r1 then r0.
  auto r4 = fanout_sources(a, "r4", caches, 2);
  ASSERT_EQ(r4.size(), 4u);
  EXPECT_EQ(r4[0].endpoint, "r1");
  EXPECT_TRUE(r4[0].peer);
  EXPECT_EQ(r4[1].endpoint, "r0");
  EXPECT_FALSE(r4[2].peer);
  EXPECT_EQ(r4[2].endpoint, "c0");  // index 4 rotates two caches by 0
  auto r3 = fanout_sources(a, "r3", caches, 2);
  EXPECT_EQ(r3[2].endpoint, "c1");  // index 3 starts at the second cache
  auto root = fanout_sources(a, "r0", caches, 2);
  ASSERT_EQ(root.size(), 2u);
  EXPECT_FALSE(root[0].peer);
  // Degree 1 is a chain: every ancestor in turn.
  auto chain = fanout_sources(b, "r3", caches, 1);
  ASSERT_EQ(chain.size(), 5u);
  EXPECT_EQ(chain[0].endpoint, "r2");
  EXPECT_EQ(chain[2].endpoint, "r0");
  // A reader missing from the list reads the caches.
  auto stranger = fanout_sources(b, "zz", caches, 2);
  ASSERT_EQ(stranger.size(), 2u);
  EXPECT_FALSE(stranger[0].peer);
  EXPECT_EQ(fanout_parent(0, 3), -1);
  EXPECT_EQ(fanout_parent(3, 3), 0);
  EXPECT_EQ(fanout_parent(4, 3), 1);
}

TEST(peer_server, AnswersBadRequestsWithAReasonAndKeepsServing) {
  auto ctx = zmq_ctx();
  auto peer = start_peer(ctx);
  const std::string bytes = random_bytes(4 * kChunk, 1);
  auto a = std::make_shared<arriving_version>(3, bytes.size(), store::sha256_hex(bytes), kChunk);
  peer->arriving().add(a);
  put_chunks(*a, bytes, 0, 1);
  auto c = cache_client::connect(ctx, peer->endpoint(), 2000);
  ASSERT_TRUE(c);
  auto expect_error = [&](const std::string& verb, const json& h, errc code,
                          const std::string& says) {
    auto r = (*c)->call(verb, h);
    ASSERT_FALSE(r) << verb << " " << h.dump();
    EXPECT_EQ(r.err().code, code) << r.err().to_string();
    EXPECT_NE(r.err().message.find(says), std::string::npos) << r.err().to_string();
  };
  expect_error("steal", json::object(), errc::unknown_command, "unknown request");
  expect_error(wire::kGet, json{{"version", 3}}, errc::invalid_argument, "'chunk'");
  expect_error(wire::kGet, json{{"version", 3}, {"chunk", 4}}, errc::invalid_argument,
               "outside version 3");
  expect_error(wire::kGet, json{{"version", 3}, {"chunk", 1}}, errc::not_found,
               "not arrived here yet");
  expect_error(wire::kMeta, json{{"version", 9}}, errc::not_found, "");
  // Still serving: the meta of the arriving version and the chunk it holds.
  auto meta = (*c)->call(wire::kMeta, json{{"version", 3}});
  ASSERT_TRUE(meta) << meta.err().to_string();
  EXPECT_TRUE(meta->header.value("arriving", false));
  EXPECT_EQ(meta->header.value("chunks_held", 0), 1);
  auto got = (*c)->call(wire::kGet, json{{"version", 3}, {"chunk", 0}});
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(got->payload, bytes.substr(0, kChunk));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // a poll publishes counters
  EXPECT_GE(peer->counters().num_bad_requests, 5u);
}

TEST(fanout_reader, ReadsAVersionFromAPeerWhileThePeerStillReceivesIt) {
  auto ctx = zmq_ctx();
  auto parent = start_peer(ctx);
  auto child = start_peer(ctx);
  const std::string bytes = random_bytes(16 * kChunk + 77, 2);
  auto a = std::make_shared<arriving_version>(5, bytes.size(), store::sha256_hex(bytes), kChunk);
  parent->arriving().add(a);
  put_chunks(*a, bytes, 0, 4);
  fanout_reader reader(ctx, child, 2000, 5000);
  result<fetched_version> got = error(errc::internal, "not run");
  std::thread t([&] { got = reader.fetch(5, {{parent->endpoint(), true}}, nullptr); });
  // The child cannot finish before the parent holds every chunk: it trails the parent.
  for (uint64_t k = 4; k < a->num_chunks(); ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    put_chunks(*a, bytes, k, k + 1);
  }
  t.join();
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, bytes);
  EXPECT_EQ(got->source, "peer");
  EXPECT_EQ(reader.counters().bytes_from_peer, bytes.size());
  EXPECT_EQ(reader.counters().bytes_from_cache, 0u);
  // The child now serves the version whole to readers below it.
  auto held = child->held().find(5);
  ASSERT_TRUE(held);
  EXPECT_EQ((*held)->content_hash, store::sha256_hex(bytes));
  EXPECT_EQ(child->arriving().find(5), nullptr);
}

TEST(fanout_reader, ACorruptChunkFromAPeerIsRefetchedThenReadFromTheCache) {
  auto ctx = zmq_ctx();
  served_cache cache(ctx, kChunk);
  const std::string bytes = random_bytes(6 * kChunk, 3);
  ASSERT_TRUE(cache.cache().insert(
      make_cached_version(8, std::make_shared<const std::string>(bytes), kChunk)));
  // A peer whose chunk 2 went bad in its memory: it serves wrong bytes under the true hash.
  auto peer = start_peer(ctx);
  auto a = std::make_shared<arriving_version>(8, bytes.size(), store::sha256_hex(bytes), kChunk);
  peer->arriving().add(a);
  put_chunks(*a, bytes, 0, 2);
  std::string bad = bytes.substr(2 * kChunk, kChunk);
  bad[100] ^= 1;
  ASSERT_TRUE(a->put_chunk(2, bad, store::sha256_hex(bytes.substr(2 * kChunk, kChunk))));
  put_chunks(*a, bytes, 3, a->num_chunks());

  fanout_reader reader(ctx, nullptr, 2000, 2000);
  auto got = reader.fetch(8, {{peer->endpoint(), true}, {cache.endpoint(), false}}, nullptr);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, bytes);
  EXPECT_EQ(reader.counters().num_chunk_refetches, 2u);  // asked twice, wrong twice
  EXPECT_EQ(reader.counters().num_failovers, 1u);
  EXPECT_EQ(reader.counters().bytes_from_peer, 2 * kChunk);
  EXPECT_EQ(reader.counters().bytes_from_cache, 4 * kChunk);
}

TEST(fanout_reader, NoHolderAndNoStoreIsNotFound) {
  auto ctx = zmq_ctx();
  served_cache cache(ctx, kChunk);
  fanout_reader reader(ctx, nullptr, 500, 200);
  auto got = reader.fetch(4, {{cache.endpoint(), false}}, nullptr);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.err().code, errc::not_found);
}

// A trainer group's version: two shards in the cache. The first reader reads them through its
// sharded reader (which assembles them) and serves the assembled version whole; a reader below
// it reads that from it as from any peer, never touching the shards.
TEST(fanout_reader, AShardedVersionIsAssembledByTheFirstReaderAndPassedOnWhole) {
  auto ctx = zmq_ctx();
  served_cache cache(ctx, kChunk);
  const std::vector<std::string> shards = {random_bytes(5 * kChunk + 11, 21),
                                           random_bytes(3 * kChunk + 5, 22)};
  for (uint32_t k = 0; k < shards.size(); ++k) {
    auto cv = make_cached_version(9, std::make_shared<const std::string>(shards[k]), kChunk);
    cv.shard = k;
    cv.num_shards = 2;
    ASSERT_TRUE(cache.cache().insert(std::move(cv)));
  }
  const std::string whole = shards[0] + shards[1];

  auto root_server = start_peer(ctx);
  version_reader shard_reader(ctx, 2000, false);
  shard_reader.set_assembler(
      [](const std::vector<fetched_shard>& s, const std::string&) -> result<std::string> {
        std::string out;
        for (const auto& one : s) out += *one.bytes;
        return out;
      });
  fanout_reader root(ctx, root_server, 2000, 2000);
  root.set_sharded_reader(
      [&](uint64_t v) { return shard_reader.fetch(v, {cache.endpoint()}, nullptr); });
  auto got = root.fetch(9, {{cache.endpoint(), false}}, nullptr);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, whole);
  EXPECT_EQ(shard_reader.counters().num_sharded_versions, 1u);
  EXPECT_EQ(shard_reader.counters().num_shards_read, 2u);
  auto held = root_server->held().find(9);
  ASSERT_TRUE(held);
  EXPECT_EQ((*held)->num_shards, 1u);
  EXPECT_EQ((*held)->content_hash, store::sha256_hex(whole));

  fanout_reader child(ctx, start_peer(ctx), 2000, 2000);
  auto below =
      child.fetch(9, {{root_server->endpoint(), true}, {cache.endpoint(), false}}, nullptr);
  ASSERT_TRUE(below) << below.err().to_string();
  EXPECT_EQ(*below->bytes, whole);
  EXPECT_EQ(below->source, "peer");
  EXPECT_EQ(child.counters().bytes_from_peer, whole.size());
  EXPECT_EQ(child.counters().bytes_from_cache, 0u);

  // A reader that cannot assemble shards does not read them (nor pass on shard 0 as the version).
  fanout_reader unable(ctx, nullptr, 500, 200);
  auto none = unable.fetch(9, {{cache.endpoint(), false}}, nullptr);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.err().code, errc::not_found);
}

}  // namespace
}  // namespace moerl::weights
