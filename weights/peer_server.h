// A reader's own server (peer serving, weights/FANOUT.md): the versions it holds whole (the
// newest few) and the one arriving, on the weight plane's ROUTER protocol (weights/wire.h,
// the same cache_server the checkpoint caches run), answered by its own thread. Other readers
// read from it exactly as from a cache; bad requests get the cache's error answers and the
// server keeps serving. A put is answered as a cache answers it (a whole version whose hash
// matches enters what the reader holds); nothing in moerl pushes to a reader. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.h"
#include "weights/arriving_version.h"
#include "weights/cache_server.h"
#include "weights/version_cache.h"
#include "zmq/context.h"

namespace moerl::weights {

class peer_server {
 public:
  // Binds `endpoint` ("tcp://ADDR:*" picks a port) and starts answering. It keeps the newest
  // max_versions whole versions within max_bytes.
  static result<std::unique_ptr<peer_server>> start(std::shared_ptr<zmq::zmq_context> ctx,
                                                    const std::string& endpoint,
                                                    uint64_t max_versions, uint64_t max_bytes);
  ~peer_server();
  peer_server(const peer_server&) = delete;
  peer_server& operator=(const peer_server&) = delete;

  const std::string& endpoint() const { return endpoint_; }  // as bound
  version_cache& held() { return *held_; }
  arriving_versions& arriving() { return *arriving_; }
  // requests, bad_requests, bytes_served (to peers), as of the last poll.
  server_counters counters() const;

 private:
  peer_server() = default;
  void serve_loop();
  std::shared_ptr<version_cache> held_;
  std::shared_ptr<arriving_versions> arriving_;
  std::unique_ptr<cache_server> server_;
  std::string endpoint_;
  mutable std::mutex counters_mu_;
  server_counters counters_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace moerl::weights
