// What a node knows of the weight plane: the checkpoint caches alive (the coordinator's view,
// refreshed by the node runtime) and the newest policy version announced. The runtime fills
// it in; the job reads it to push and fetch versions. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "weights/peer_server.h"
#include "zmq/context.h"

namespace moerl::weights {

class cache_directory {
 public:
  cache_directory(std::shared_ptr<zmq::zmq_context> ctx, std::string self_endpoint = "")
      : ctx_(std::move(ctx)), self_(std::move(self_endpoint)) {}

  const std::shared_ptr<zmq::zmq_context>& zmq() const { return ctx_; }

  // The caches alive, as the coordinator lists them (this node's own cache left out).
  void set_caches(std::vector<std::string> endpoints) {
    std::lock_guard<std::mutex> g(mu_);
    caches_.clear();
    for (auto& e : endpoints)
      if (e != self_) caches_.push_back(std::move(e));
    refreshed_ = true;
    cv_.notify_all();
  }
  std::vector<std::string> caches() const {
    std::lock_guard<std::mutex> g(mu_);
    return caches_;
  }
  // Waits up to `timeout` for the first refresh (a node that just started); true once it came.
  bool wait_refreshed(std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> g(mu_);
    return cv_.wait_for(g, timeout, [&] { return refreshed_; });
  }

  // Fan-out (weights/FANOUT.md, weights.fanout): this node's server for its peers, and the
  // readers present (every rollout node's server, this one's included), refreshed with the
  // caches. Unset: the node reads from the caches alone.
  // `advertised`: the server's endpoint as the coordinator lists it (the node's endpoint).
  void serve_peers(std::shared_ptr<peer_server> server, std::string advertised, int degree) {
    std::lock_guard<std::mutex> g(mu_);
    peer_ = std::move(server);
    peer_endpoint_ = std::move(advertised);
    degree_ = degree;
  }
  std::string peer_endpoint() const {
    std::lock_guard<std::mutex> g(mu_);
    return peer_endpoint_;
  }
  std::shared_ptr<peer_server> peer() const {
    std::lock_guard<std::mutex> g(mu_);
    return peer_;
  }
  int fanout_degree() const {
    std::lock_guard<std::mutex> g(mu_);
    return degree_;
  }
  void set_readers(std::vector<std::string> endpoints) {
    std::lock_guard<std::mutex> g(mu_);
    readers_ = std::move(endpoints);
  }
  std::vector<std::string> readers() const {
    std::lock_guard<std::mutex> g(mu_);
    return readers_;
  }

  void announce(uint64_t version) {
    uint64_t seen = announced_.load();
    while (version > seen && !announced_.compare_exchange_weak(seen, version)) {}
  }
  uint64_t announced() const { return announced_.load(); }

 private:
  std::shared_ptr<zmq::zmq_context> ctx_;
  std::string self_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<std::string> caches_;
  bool refreshed_ = false;
  std::shared_ptr<peer_server> peer_;
  std::string peer_endpoint_;
  int degree_ = 2;
  std::vector<std::string> readers_;
  std::atomic<uint64_t> announced_{0};
};

}  // namespace moerl::weights
