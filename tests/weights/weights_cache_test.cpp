// The weight plane on real sockets: a cache server on loopback, pushers and readers talking
// to it, a cache stopped mid-version, a cache that serves a corrupt chunk, bad requests.
#include <gtest/gtest.h>

#include <zmq.h>

#include <atomic>
#include <thread>

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

constexpr uint64_t kChunk = 64 * 1024;

using testing::random_bytes;
using testing::served_cache;
using testing::zmq_ctx;

TEST(version_cache, KeepsTheNewestWithinVersionsAndBytes) {
  version_cache c(2, 1000);
  auto add = [&](uint64_t v, size_t n) {
    return c.insert(make_cached_version(v, std::make_shared<std::string>(random_bytes(n, v)), 100));
  };
  ASSERT_TRUE(add(1, 300));
  ASSERT_TRUE(add(2, 300));
  ASSERT_TRUE(add(3, 300));  // over cache_versions: v1 goes
  EXPECT_EQ(c.versions(), (std::vector<uint64_t>{2, 3}));
  ASSERT_TRUE(add(4, 900));  // over cache_bytes: v2 and v3 go
  EXPECT_EQ(c.versions(), (std::vector<uint64_t>{4}));
  EXPECT_EQ(c.num_bytes(), 900u);
  EXPECT_EQ(c.num_evicted(), 3u);
  auto big = add(5, 1001);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.err().code, errc::capacity_exceeded);
  auto missing = c.find(7);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.err().code, errc::not_found);
  EXPECT_NE(missing.err().message.find("holds 4"), std::string::npos) << missing.err().message;
  auto v4 = c.find(4);
  ASSERT_TRUE(v4);
  EXPECT_EQ((*v4)->num_chunks(), 9u);
  EXPECT_EQ((*v4)->chunk_size(8), 100u);
}

TEST(version_cache, EveryChunkCarriesTheHashOfItsOwnBytes) {
  // One chunk (whose hash is the version's), an exact multiple and a short last chunk.
  for (size_t n : {size_t{1}, size_t{99}, size_t{100}, size_t{300}, size_t{301}}) {
    const std::string bytes = random_bytes(n, n);
    auto cv = make_cached_version(1, std::make_shared<std::string>(bytes), 100);
    EXPECT_EQ(cv.content_hash, store::sha256_hex(bytes));
    ASSERT_EQ(cv.num_chunks(), (n + 99) / 100) << n;
    for (uint64_t k = 0; k < cv.num_chunks(); ++k)
      EXPECT_EQ(cv.chunk_hashes[k], store::sha256_hex(bytes.substr(k * 100, cv.chunk_size(k))))
          << n << " bytes, chunk " << k;
  }
}

TEST(cache_server, PushedVersionIsReadBackWhole) {
  auto ctx = zmq_ctx();
  served_cache cache(ctx, kChunk);
  const std::string bytes = random_bytes(5 * kChunk + 123, 1);
  auto pusher = cache_client::connect(ctx, cache.endpoint(), 2000);
  ASSERT_TRUE(pusher);
  // The pusher's chunks need not be the cache's: the cache re-chunks for its readers.
  ASSERT_TRUE(push_version(**pusher, 7, bytes, store::sha256_hex(bytes), 40000));
  EXPECT_EQ(cache.cache().versions(), (std::vector<uint64_t>{7}));

  version_reader reader(ctx, 2000);
  auto got = reader.fetch(7, {cache.endpoint()}, nullptr);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, bytes);
  EXPECT_EQ(got->source, "cache");
  EXPECT_EQ(reader.counters().bytes_from_cache, bytes.size());
  EXPECT_EQ(reader.counters().bytes_from_store, 0u);
}

TEST(cache_server, PutWithAWrongContentHashNeverEntersTheCache) {
  auto ctx = zmq_ctx();
  served_cache cache(ctx, kChunk);
  const std::string bytes = random_bytes(2 * kChunk, 2);
  auto pusher = cache_client::connect(ctx, cache.endpoint(), 2000);
  ASSERT_TRUE(pusher);
  auto st = push_version(**pusher, 3, bytes, store::sha256_hex("something else"), kChunk);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code, errc::invalid_argument) << st.err().to_string();
  EXPECT_NE(st.err().message.find("does not match its content hash"), std::string::npos);
  EXPECT_TRUE(cache.cache().versions().empty());
}

TEST(cache_server, BadRequestsGetClearErrorsAndTheCacheKeepsServing) {
  auto ctx = zmq_ctx();
  served_cache cache(ctx, kChunk);
  const std::string bytes = random_bytes(3 * kChunk, 3);
  auto c = cache_client::connect(ctx, cache.endpoint(), 2000);
  ASSERT_TRUE(c);
  ASSERT_TRUE(push_version(**c, 5, bytes, store::sha256_hex(bytes), kChunk));

  auto expect_error = [&](const std::string& verb, const json& h, errc code,
                          const std::string& names) {
    auto a = (*c)->call(verb, h);
    ASSERT_FALSE(a) << verb << " " << h.dump();
    EXPECT_EQ(a.err().code, code) << a.err().to_string();
    EXPECT_NE(a.err().message.find(names), std::string::npos) << a.err().message;
  };
  expect_error("steal", json::object(), errc::unknown_command, "unknown request 'steal'");
  expect_error(wire::kMeta, json{{"version", 9}}, errc::not_found, "version 9 is not held");
  expect_error(wire::kGet, json{{"version", 5}, {"chunk", 3}}, errc::invalid_argument,
               "chunk 3 is outside version 5's 3 chunks");
  expect_error(wire::kGet, json{{"version", 5}, {"chunk", -1}}, errc::invalid_argument, "'chunk'");
  expect_error(wire::kGet, json{{"version", "five"}}, errc::invalid_argument, "'version'");
  auto bad_put = (*c)->call(wire::kPut,
                            json{{"version", 6},
                                 {"offset", 1ull << 40},
                                 {"total_bytes", 10},
                                 {"content_hash", std::string(64, 'a')},
                                 {"chunk_hash", std::string(64, 'b')}},
                            "xyz");
  ASSERT_FALSE(bad_put);
  EXPECT_NE(bad_put.err().message.find("outside a version of 10 bytes"), std::string::npos);

  // Raw garbage: a header that is not JSON, and a message of the wrong shape.
  void* raw = zmq_socket(ctx->handle(), ZMQ_DEALER);
  int linger = 0, timeout = 2000;
  zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(raw, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  ASSERT_EQ(zmq_connect(raw, cache.endpoint().c_str()), 0);
  auto answer_of = [&]() {
    std::vector<std::string> parts;
    int more = 1;
    while (more) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, raw, 0) == -1) {
        zmq_msg_close(&m);
        break;
      }
      parts.emplace_back(static_cast<char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
      more = zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    return parts;
  };
  zmq_send(raw, "get", 3, ZMQ_SNDMORE);
  zmq_send(raw, "\x01\x02garbage", 9, 0);
  auto a1 = answer_of();
  ASSERT_EQ(a1.size(), 2u);
  EXPECT_EQ(a1[0], wire::kError);
  EXPECT_NE(a1[1].find("not a JSON object"), std::string::npos) << a1[1];
  zmq_send(raw, "only one part", 13, 0);
  auto a2 = answer_of();
  ASSERT_EQ(a2.size(), 2u);
  EXPECT_NE(a2[1].find("2 or 3 parts"), std::string::npos) << a2[1];
  zmq_close(raw);

  version_reader reader(ctx, 2000);
  auto got = reader.fetch(5, {cache.endpoint()}, nullptr);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, bytes);
}

TEST(version_reader, ResumesFromAnotherCacheWhenOneStopsMidVersion) {
  auto ctx = zmq_ctx();
  const std::string bytes = random_bytes(8 * kChunk, 4);
  // The first cache answers its put, the reader's meta and three chunks, then dies.
  const uint64_t num_put_requests = 8;
  served_cache dying(ctx, kChunk, num_put_requests + 1 + 3);
  served_cache healthy(ctx, kChunk);
  for (auto* ep : {&dying.endpoint(), &healthy.endpoint()}) {
    auto c = cache_client::connect(ctx, *ep, 2000);
    ASSERT_TRUE(c);
    ASSERT_TRUE(push_version(**c, 11, bytes, store::sha256_hex(bytes), kChunk));
  }
  // The default weights.request_timeout_ms: a dead cache is known only by its silence, and a
  // tighter bound than a live cache's answers take on a loaded machine fails a live one too.
  version_reader reader(ctx, 2000);
  // The healthy cache is asked for meta only after the dying one (the order of the list), and
  // both report no load, so the reader starts on the dying one.
  auto got = reader.fetch(11, {dying.endpoint(), healthy.endpoint()}, nullptr);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, bytes);
  EXPECT_EQ(reader.counters().num_failovers, 1u);
  EXPECT_EQ(reader.counters().bytes_from_cache, bytes.size());
}

TEST(version_reader, FallsBackToTheStoreWhenNoCacheHoldsTheVersion) {
  auto ctx = zmq_ctx();
  served_cache cache(ctx, kChunk);
  const std::string bytes = random_bytes(1000, 5);
  version_reader reader(ctx, 500);
  int store_reads = 0;
  auto from_store = [&]() -> result<std::string> {
    ++store_reads;
    return bytes;
  };
  // One cache that lacks it, one endpoint nobody listens on.
  auto got = reader.fetch(2, {cache.endpoint(), "tcp://127.0.0.1:1"}, from_store);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, bytes);
  EXPECT_EQ(got->source, "store");
  EXPECT_EQ(store_reads, 1);
  EXPECT_EQ(reader.counters().bytes_from_store, 1000u);
  EXPECT_EQ(reader.counters().num_store_fallbacks, 1u);
  auto none = reader.fetch(2, {cache.endpoint()}, nullptr);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.err().code, errc::not_found);
}

// A cache that answers like the real one but corrupts the first copy of chunk 1 it sends.
TEST(version_reader, RefetchesAChunkThatDoesNotMatchItsHash) {
  auto ctx = zmq_ctx();
  const std::string bytes = random_bytes(3 * kChunk, 6);
  auto cv = make_cached_version(4, std::make_shared<std::string>(bytes), kChunk);
  void* router = zmq_socket(ctx->handle(), ZMQ_ROUTER);
  int linger = 0;
  zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof linger);
  ASSERT_EQ(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
  char ep[256];
  size_t len = sizeof ep;
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &len);
  std::atomic<bool> stop{false};
  std::thread fake([&] {
    bool corrupted = false;
    while (!stop) {
      zmq_pollitem_t item{router, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 10) <= 0) continue;
      std::vector<std::string> parts;
      int more = 1;
      while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, router, 0);
        parts.emplace_back(static_cast<char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
      }
      auto h = json::parse(parts[2]);
      json out{{"rid", h["rid"]}};
      std::string payload;
      if (parts[1] == wire::kMeta) {
        out.update(json{{"bytes", bytes.size()},
                        {"content_hash", cv.content_hash},
                        {"chunk_bytes", kChunk},
                        {"num_chunks", cv.num_chunks()},
                        {"load", 0}});
      } else {
        const uint64_t k = h["chunk"];
        payload = bytes.substr(cv.chunk_offset(k), cv.chunk_size(k));
        if (k == 1 && !corrupted) {
          payload[17] ^= 0x5a;
          corrupted = true;
        }
        out.update(json{{"offset", cv.chunk_offset(k)}, {"chunk_hash", cv.chunk_hashes[k]}});
      }
      const std::string text = out.dump();
      zmq_send(router, parts[0].data(), parts[0].size(), ZMQ_SNDMORE);
      zmq_send(router, "ok", 2, ZMQ_SNDMORE);
      zmq_send(router, text.data(), text.size(), payload.empty() ? 0 : ZMQ_SNDMORE);
      if (!payload.empty()) zmq_send(router, payload.data(), payload.size(), 0);
    }
  });
  version_reader reader(ctx, 2000);
  auto got = reader.fetch(4, {ep}, nullptr);
  stop = true;
  fake.join();
  zmq_close(router);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, bytes);
  EXPECT_EQ(reader.counters().num_chunk_refetches, 1u);
}

}  // namespace
}  // namespace moerl::weights
