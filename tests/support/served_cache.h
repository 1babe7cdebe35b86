// What the weight plane's tests share (tests/weights, and the rollout's feed in tests/job):
// a real checkpoint cache (weights/cache_server.h) on loopback, served on its own thread until
// destroyed, or until it answered `stop_after_requests` requests (then its socket closes: a
// cache that dies mid-version), with its same-host /dev/shm path on or off; a ZeroMQ
// context; deterministic random version bytes.
#pragma once

#ifndef MOERL_TEST_CODE
#error \
    "tests/support/served_cache.h is test code: production code (benches too) must not include tests/"
#endif

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "weights/cache_server.h"
#include "weights/version_cache.h"

namespace moerl::testing {

inline std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

inline std::shared_ptr<zmq::zmq_context> zmq_ctx() {
  auto z = zmq::zmq_context::create();
  EXPECT_TRUE(z) << z.err().to_string();
  return *z;
}

class served_cache {
 public:
  served_cache(std::shared_ptr<zmq::zmq_context> ctx, uint64_t chunk_bytes,
               uint64_t stop_after_requests = ~0ull, bool same_host_shm = false)
      : cache_(std::make_shared<weights::version_cache>(4, 64 << 20)) {
    auto s = weights::cache_server::bind(ctx, "tcp://127.0.0.1:*", cache_, chunk_bytes);
    EXPECT_TRUE(s) << s.err().to_string();
    server_ = std::move(*s);
    server_->enable_same_host_shm(same_host_shm);
    endpoint_ = server_->endpoint();
    thread_ = std::thread([this, stop_after_requests] {
      while (!stop_ && server_->counters().num_requests < stop_after_requests)
        EXPECT_TRUE(server_->poll(10));
      server_.reset();  // the socket closes: later requests go unanswered
    });
  }
  ~served_cache() {
    stop_ = true;
    thread_.join();
  }
  served_cache(const served_cache&) = delete;
  served_cache& operator=(const served_cache&) = delete;
  const std::string& endpoint() const { return endpoint_; }
  weights::version_cache& cache() { return *cache_; }

 private:
  std::shared_ptr<weights::version_cache> cache_;
  std::unique_ptr<weights::cache_server> server_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace moerl::testing
